"""The dashboard's state and logic as ``param.Parameterized`` classes: no Panel import, testable without a browser."""
