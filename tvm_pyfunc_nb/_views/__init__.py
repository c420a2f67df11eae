"""The views: rendering (`render`), ipywidgets (`widgets`), the notebook front end. Internal."""
