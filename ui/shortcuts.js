// The Annotate tab's keyboard: 1/S same, 2/D different, 3/U unsure, K skip, Z undo. A key clicks the
// matching button while it is on screen and enabled, unless the user is typing in a field.
(() => {
  const JUDGING = ["judge-same", "judge-different", "judge-unsure", "judge-skip", "judge-block", "judge-done", "judge-undo"];
  const LOADING = ["annotate-task", "annotate-next", "annotate-pick-button", "annotate-typed-button", ...JUDGING];
  // Off at once in the page, before the server's own 'busy' step answers: a key pressed while
  // the next item loads must not judge the one still on screen. The server turns them on again.
  const hold = () => JUDGING.forEach((id) => { const b = document.getElementById(id); if (b) b.disabled = true; });
  document.addEventListener("click", (event) => {
    if (event.target.closest && LOADING.some((id) => event.target.closest("#" + id))) hold();
  });
  document.addEventListener("keydown", (event) => {
    const target = event.target;
    if (event.key === "Enter" && target && target.closest && target.closest("#annotate-pick, #annotate-typed")) { hold(); return; }
    if (event.ctrlKey || event.metaKey || event.altKey || event.repeat) return;
    if (target && (target.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(target.tagName))) return;
    const ids = {"1": "judge-same", "s": "judge-same", "2": "judge-different", "d": "judge-different",
                 "3": "judge-unsure", "u": "judge-unsure", "k": "judge-skip", "z": "judge-undo"};
    const button = document.getElementById(ids[event.key.toLowerCase()]);
    if (button && button.offsetParent !== null && !button.disabled) {
      event.preventDefault();
      button.click();
    }
  });
})();
