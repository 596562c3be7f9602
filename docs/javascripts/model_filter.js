// The models index: filter the table by an fnmatch pattern, as zoo.list_models(pattern) does.
function fnmatchToRegExp(pattern) {
  let source = "";
  for (const ch of pattern) {
    if (ch === "*") source += ".*";
    else if (ch === "?") source += ".";
    else source += ch.replace(/[.+^${}()|[\]\\]/g, "\\$&");
  }
  return new RegExp("^" + source + "$");
}

function setUpModelFilter() {
  const input = document.getElementById("model-filter");
  if (!input) return;
  const pretrained = document.getElementById("model-filter-pretrained");
  const count = document.getElementById("model-filter-count");
  const rows = Array.from(document.querySelectorAll("article table tbody tr"));
  function apply() {
    const text = input.value.trim();
    const re = fnmatchToRegExp(text === "" ? "*" : (/[*?]/.test(text) ? text : "*" + text + "*"));
    let shown = 0;
    for (const row of rows) {
      const name = row.cells[0].textContent.trim();
      const shipped = row.cells[4].textContent.trim() !== "-";
      const visible = re.test(name) && (!pretrained.checked || shipped);
      row.style.display = visible ? "" : "none";
      if (visible) shown += 1;
    }
    count.textContent = shown + " of " + rows.length + " models";
  }
  input.addEventListener("input", apply);
  pretrained.addEventListener("change", apply);
  apply();
}

if (typeof document$ !== "undefined") {
  document$.subscribe(setUpModelFilter);  // Material's instant navigation
} else {
  document.addEventListener("DOMContentLoaded", setUpModelFilter);
}
