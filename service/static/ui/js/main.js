// The page's entry point: the API key, and which view the address (#/...) shows.
//   #/           datasets, upload, job form, jobs
//   #/jobs/{id}  one job: live progress, then its result

import { apiKey, getJSON } from "./api.js";
import { errorBox, h, show } from "./dom.js";
import { homeView } from "./home.js";
import { jobView } from "./job.js";

const view = document.getElementById("view");
const dialog = document.getElementById("key-dialog");
let current = new AbortController();

/** Ask for a key (again, with `problem` when one was refused); resolves once it is set. */
function askForKey(problem) {
  return new Promise((resolve) => {
    const form = document.getElementById("key-form");
    const message = document.getElementById("key-error");
    message.hidden = !problem;
    message.textContent = problem ? `That key was not accepted: ${problem.detail}` : "";
    form.onsubmit = () => {
      apiKey.set(document.getElementById("key-input").value.trim());
      resolve();
    };
    dialog.showModal();
  });
}

function keyState() {
  const state = document.getElementById("key-state");
  if (!apiKey.get()) return show(state);
  const forget = () => {
    apiKey.clear();
    location.reload();
  };
  show(
    state,
    "key set ",
    h("button", { type: "button", className: "small", onclick: forget }, "Forget key"),
  );
}

/** Until the API answers: ask for a key while it says 401. */
async function authenticate() {
  for (;;) {
    try {
      await getJSON("v1/jobs?limit=1");
      keyState();
      return;
    } catch (error) {
      if (error.status !== 401) throw error;
      const refused = apiKey.get() !== null;
      apiKey.clear();
      await askForKey(refused ? error.problem : null);
    }
  }
}

async function route() {
  current.abort(); // the previous view's event streams
  current = new AbortController();
  const match = location.hash.match(/^#\/jobs\/([A-Za-z0-9_.-]+)$/);
  try {
    if (match) await jobView(view, match[1], current.signal);
    else await homeView(view, current.signal);
  } catch (error) {
    if (error.name === "AbortError") return;
    if (error.status === 401) {
      await authenticate();
      return route();
    }
    show(
      view,
      h(
        "section",
        { className: "card wide" },
        errorBox(error),
        h("a", { href: "#/" }, "Back to the datasets and jobs"),
      ),
    );
  }
}

window.addEventListener("hashchange", route);
authenticate()
  .then(route)
  .catch((error) => show(view, errorBox(error)));
