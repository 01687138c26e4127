// The Annotate tab's keyboard: 1/S same, 2/D different, 3/U unsure, K skip, Z undo; the Clusters tab's:
// B belongs, X does not belong. A key clicks the
// matching button while it is on screen and enabled, unless the user is typing in a field. A key
// pressed while the next item loads is not recorded, and a notice says so.
(() => {
  const JUDGING = ["judge-same", "judge-different", "judge-unsure", "judge-skip", "judge-block", "judge-done", "judge-undo"];
  const LOADING = ["annotate-task", "annotate-next", "annotate-pick-button", "annotate-typed-button", ...JUDGING];
  const inside = (target, ids) => target && target.closest && ids.some((id) => target.closest("#" + id));
  // From a click that asks the server for the next item until its answer arrives (it always
  // renews #annotate-ticket), the judging keys and buttons do nothing: a key pressed while the
  // next item loads must not judge the one still on screen. 15 s at most, should an answer be lost.
  const ticket = () => document.querySelector("#annotate-ticket [data-answered]")?.dataset.answered;
  let heldSince = 0, heldTicket;
  const hold = () => { heldSince = Date.now(); heldTicket = ticket(); };
  const holding = () => {
    const now = ticket();
    return Date.now() - heldSince < 15000 && !(now !== undefined && now !== heldTicket);
  };
  document.addEventListener("click", (event) => {
    if (!inside(event.target, LOADING)) return;
    if (holding() && inside(event.target, JUDGING)) {
      event.stopImmediatePropagation();
      event.preventDefault();
      return;
    }
    hold();
  }, true);
  document.addEventListener("keydown", (event) => {
    const target = event.target;
    if (event.key === "Enter" && inside(target, ["annotate-pick", "annotate-typed"])) { hold(); return; }
    if (event.ctrlKey || event.metaKey || event.altKey || event.repeat) return;
    if (target && (target.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(target.tagName))) return;
    const ids = {"1": "judge-same", "s": "judge-same", "2": "judge-different", "d": "judge-different",
                 "3": "judge-unsure", "u": "judge-unsure", "k": "judge-skip", "z": "judge-undo",
                 "b": "clusters-belongs", "x": "clusters-not-belong"};  // the Clusters tab's marks
    const button = document.getElementById(ids[event.key.toLowerCase()]);
    if (button && button.offsetParent !== null && !button.disabled) {
      event.preventDefault();
      if (!holding()) { tell(""); button.click(); return; }
      // Never judge an item not yet on screen, and never drop a key without a word.
      tell(`Key "${event.key}" was not recorded: the next item was still loading. Look at it, then press again.`);
    }
  });
  // The notice of an ignored key: stays until the next key that counts.
  const tell = (text) => {
    let notice = document.getElementById("key-notice");
    if (!notice) {
      notice = Object.assign(document.createElement("div"), {id: "key-notice", role: "status"});
      notice.style.cssText = "position:fixed;bottom:1em;left:1em;z-index:1000;padding:.5em 1em;background:#fff3cd;" +
        "border:1px solid #c9a227;border-radius:4px;max-width:40em";
      document.body.appendChild(notice);
    }
    notice.textContent = text;
    notice.hidden = !text;
  };
})();
