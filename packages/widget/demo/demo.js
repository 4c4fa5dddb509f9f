// The demo page's script (index.html), served as /demo.js under the page's strict CSP: it runs at
// the end of the body, once the elements it finds are there.
// The snippet names this gateway, so it can be pasted as is.
const snippet = document.getElementById("snippet");
snippet.textContent = snippet.textContent.replace("https://your-gateway", location.origin);

document.getElementById("copy").addEventListener("click", async (event) => {
  const button = event.currentTarget;
  try {
    await navigator.clipboard.writeText(snippet.textContent);
    button.textContent = "Copied";
  } catch {
    // No clipboard access (insecure context): select the text for a manual copy.
    getSelection().selectAllChildren(snippet);
    button.textContent = "Press Ctrl+C";
  }
  setTimeout(() => (button.textContent = "Copy"), 1500);
});

// Every button goes through the demo server's own route, which changes the counter with the
// publisher SDK and holds the key: no key ever reaches the browser. The new value arrives over
// the widgets' socket like any other update.
const TRIES = 3;
const newId = () =>
  crypto.randomUUID
    ? crypto.randomUUID()
    : Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, "0")).join("");
const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// One id per click, reused by its retries, so a click counts once even when an answer is lost.
async function change(counter, action) {
  const body = JSON.stringify({ page: "demo", counter, action, id: newId() });
  for (let attempt = 1; ; attempt++) {
    let res;
    try {
      res = await fetch("/demo/counter", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body,
      });
    } catch (err) {
      if (attempt >= TRIES) throw err;
      await pause(250 * attempt);
      continue;
    }
    if (res.ok) return res.json();
    if (res.status >= 500 && attempt < TRIES) {
      await pause(250 * attempt);
      continue;
    }
    const answer = await res.json().catch(() => ({}));
    throw new Error(answer.error?.code ?? `HTTP ${res.status}`);
  }
}

// What a failed change tells the visitor, by error code.
const FAILURES = {
  rate_limited: "Too many taps at once: the demo takes a few a second from everyone. Try again in a moment.",
  not_found:
    "This server only shows counts: the buttons need the demo back end that npm start runs. " +
    "Change counters with the publisher SDK or the HTTP API.",
};
const actionButtons = () => document.querySelectorAll("#like, .reaction, #notify, #mark-read");
let noBackEnd = false;

function onClick(button, counter, action, status, done, busy) {
  button.addEventListener("click", async () => {
    if (busy) button.disabled = true;
    status.textContent = "";
    try {
      await change(counter, action);
      status.textContent = done;
    } catch (err) {
      status.textContent = FAILURES[err.message] ?? `Could not save that: ${err.message}`;
      // No demo route here (a gateway of a cluster): the buttons can do nothing.
      noBackEnd = err.message === "not_found";
    } finally {
      if (noBackEnd) for (const b of actionButtons()) b.disabled = true;
      else button.disabled = false;
    }
  });
}

onClick(
  document.getElementById("like"),
  "likes",
  "increment",
  document.getElementById("like-status"),
  "Thanks!",
  true,
);
const reactionStatus = document.getElementById("reaction-status");
for (const button of document.querySelectorAll(".reaction"))
  onClick(button, button.dataset.counter, "increment", reactionStatus, "", false);
const inboxStatus = document.getElementById("inbox-status");
onClick(document.getElementById("notify"), "unread", "increment", inboxStatus, "", false);
onClick(document.getElementById("mark-read"), "unread", "reset", inboxStatus, "All caught up.", true);

// The badge shows only while something is unread.
const unread = document.getElementById("unread");
unread.addEventListener("livecount", (event) => {
  unread.hidden = !((event.detail.counters.unread || 0) > 0);
});
