"""Floor 5: the Panel dashboard: a Panel-free ``param`` model (``model/``) and its thin views."""
