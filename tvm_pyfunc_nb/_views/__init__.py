"""The views: rendering (`render`), ipywidgets (`widgets`), the notebook front end, and
`NAME.graph`'s picture (`graph_view`, `graphviz_engine`, `graph_widget`). Internal."""
