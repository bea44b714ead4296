"""The dashboard view without a browser: it builds around its model, lazily, and shows program
text as text. (What only a page can show is in test_dashboard_browser.py.)"""

from __future__ import annotations


def test_the_view_builds_without_a_server(tmp_path, executor):
    import panel as pn

    import explorer

    view = explorer.dashboard(store=tmp_path / "r.sqlite", executor=executor, n_states=10)
    try:
        assert isinstance(view, explorer.Dashboard)
        assert isinstance(view.model, explorer.ExplorerModel)
        assert view.model.controls.n_states == 10
        layout = view.__panel__()
        assert isinstance(layout, pn.Row)  # a template only when served
        layout.get_root()
        # The Programs tab is built the first time it is opened.
        assert not view.programs.built
        view.tabs.active = 1
        assert view.programs.built
        assert not view.runs.built
        view.tabs.active = 2
        assert view.runs.built
    finally:
        view.model.close()


def test_program_text_is_escaped_never_markup():
    from explorer._dashboard import program_html

    html = program_html('<script>alert("x")</script> & <b>')
    assert "<script>" not in html and "<b>" not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &lt;b&gt;" in html
    diff = program_html("--- a\n+++ b\n-old <i>\n+new\n same", diff=True)
    assert diff.count("<span") == 2 and "&lt;i&gt;" in diff and "<i>" not in diff
    assert program_html("") == ""


def test_side_by_side_and_verdict_lead_with_what_differs():
    from explorer._dashboard_sections import ProgramsSection, side_by_side_html

    comparison = {"labels": ("dict", "<array>"), "distinct": (("a = mul <b>", ""), ("", "c")),
                  "op_summary": "dict: 6 × mul\narray: 1 × mul", "title": "t", "verdict": "v",
                  "same_hlo": False}
    table = side_by_side_html(comparison)
    assert table.count("<tr>") == 3  # a header and one row per pair
    assert "only in &lt;array&gt;" in table and "mul &lt;b&gt;" in table and "<b>" not in table
    assert "No jaxpr line differs" in side_by_side_html({**comparison, "distinct": ()})
    assert side_by_side_html({}) == ""
    text = ProgramsSection._verdict_text(comparison)
    assert text.index("Operations that differ") < text.index("`dict: 6 × mul`")
    assert "Operations" not in ProgramsSection._verdict_text({**comparison, "op_summary": ""})
