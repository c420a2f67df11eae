"""The views: pure rendering (`render`), ipywidgets (`widgets`), the view registry. Internal."""
