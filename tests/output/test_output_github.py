from graphready.findings import Severity, summarize
from graphready.output import render
from graphready.output.github import escape_data, escape_property


def github(findings, **kwargs):
    return render("github", findings, summarize(findings, Severity.ERROR), tool="lint", **kwargs).splitlines()


def test_one_command_per_finding_with_one_based_columns(host_sync):
    assert github([host_sync()]) == [
        "::error file=pkg/model.py,line=7,col=12,endLine=7,endColumn=32,title=GR101 host-sync"
        "::`.item()` copies a device value to the host"
    ]


def test_severity_picks_the_command_and_baselined_debt_comes_last_as_notice(host_sync):
    lines = github([host_sync(line=1, baselined=True), host_sync(line=2, severity=Severity.INFO),
                    host_sync(line=3, severity=Severity.WARNING), host_sync(line=4)])
    assert [line.split(" ", 1)[0] for line in lines] == ["::error", "::warning", "::notice", "::notice"]
    assert "title=GR101 host-sync (baseline)::" in lines[-1] and "line=1," in lines[-1]


def test_message_and_properties_are_escaped(host_sync):
    finding = host_sync(path="a,b:c.py", message="100% sure\r\nsecond line", name="x")
    (line,) = github([finding])
    assert line.startswith("::error file=a%2Cb%3Ac.py,line=7,")
    assert line.endswith("title=GR101 x::100%25 sure%0D%0Asecond line")
    assert escape_property("50%,a:b\n") == "50%25%2Ca%3Ab%0A"
    assert escape_data("a:b,c") == "a:b,c"


def test_hot_chain_is_appended_when_asked(host_sync):
    (line,) = github([host_sync()], show_chain=True)
    assert line.endswith("host%0Ahot chain: pkg.model:step -> pkg.model:post_block")


def test_no_findings_no_commands():
    assert github([]) == []
