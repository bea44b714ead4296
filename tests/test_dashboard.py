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


def test_a_page_closed_mid_update_is_one_quiet_line_and_other_errors_still_reach_the_log(caplog):
    """tornado reports a tab closed while the server sends it updates as a never-retrieved
    WebSocketClosedError, two tracebacks in the server log (seen under load in the five-sessions
    test); the server's loop turns that into one quiet line and passes every other error on."""
    import asyncio  # noqa: PLC0415
    import logging  # noqa: PLC0415

    from tornado.websocket import WebSocketClosedError  # noqa: PLC0415

    from explorer._dashboard import _quiet_closed_pages  # noqa: PLC0415

    loop = asyncio.new_event_loop()
    passed_on = []
    loop.set_exception_handler(lambda loop, context: passed_on.append(context))
    try:
        _quiet_closed_pages(loop)
        _quiet_closed_pages(loop)  # once per loop: the previous handler is not wrapped twice
        with caplog.at_level(logging.INFO):
            loop.call_exception_handler({"message": "Task exception was never retrieved",
                                         "exception": WebSocketClosedError()})
        assert passed_on == []
        assert [r.levelno for r in caplog.records] == [logging.INFO]
        assert "\n" not in caplog.records[0].getMessage()
        other = {"message": "boom", "exception": ZeroDivisionError()}
        loop.call_exception_handler(other)
        assert passed_on == [other]
    finally:
        loop.close()
