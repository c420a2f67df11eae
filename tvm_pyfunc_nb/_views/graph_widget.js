// The widget of `NAME.graph` (anywidget): the picture the kernel laid out, a group folded or
// unfolded on a click (the kernel lays the graph out again), a node's details on a click.
// Everything on screen comes from the model: `svg`, `details` (node id -> rows), `title`.

function button(label, event, model) {
  const b = document.createElement("button");
  b.textContent = label;
  b.className = "tvm-graph-button";
  b.addEventListener("click", () => model.send({ event }));
  return b;
}

function render({ model, el }) {
  el.classList.add("tvm-pyfunc-nb-graph");
  const head = document.createElement("div");
  head.className = "tvm-graph-head";
  const title = document.createElement("span");
  title.className = "tvm-graph-title";
  head.append(title, button("fold all", "fold_all", model), button("unfold all", "unfold_all", model));
  const picture = document.createElement("div");
  picture.className = "tvm-graph-picture";
  const info = document.createElement("div");
  info.className = "tvm-graph-details";
  info.textContent = "Click a node for its binding, op, TVMScript and source lines; a group's label folds it.";
  el.append(head, picture, info);

  function show(id) {
    const found = model.get("details")[id];
    if (!found) return;
    const table = document.createElement("table");
    for (const [label, text] of found) {
      const row = table.insertRow();
      row.insertCell().textContent = label;
      row.insertCell().textContent = text;
    }
    info.replaceChildren(table);
    picture.querySelectorAll(".tvm-graph-selected").forEach((g) => g.classList.remove("tvm-graph-selected"));
    picture.querySelector(`[id="${id}"]`)?.classList.add("tvm-graph-selected");
  }

  function draw() {
    title.textContent = model.get("title");
    picture.innerHTML = model.get("svg");
    for (const group of picture.querySelectorAll("g.cluster")) {
      group.addEventListener("click", (event) => {
        event.stopPropagation();
        model.send({ event: "fold", group: group.id });
      });
    }
    for (const node of picture.querySelectorAll("g.node")) {
      node.addEventListener("click", (event) => {
        event.stopPropagation();
        if (node.id.startsWith("g")) model.send({ event: "unfold", group: node.id });
        else show(node.id);
      });
    }
  }

  model.on("change:svg", draw);
  draw();
  return () => model.off("change:svg", draw);
}

export default { render };
