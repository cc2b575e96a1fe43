"""rbfkm service: the REST API, the Redis job queue and the workers around `rbfkm_engine`."""

__version__ = "0.1.0"
