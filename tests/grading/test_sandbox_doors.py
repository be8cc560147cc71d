"""The worker's sandbox has no open doors: no network (loopback included) and no other process.

A probe submission (the toy exercise's stubs plus a cell that tries every door) is graded through the
real engine, by a Grader and by `bertcourse grade`. It tries to connect to a TCP listener this test
opens on 127.0.0.1, to send it a UDP datagram, to resolve a name, to list /proc and to read the
command line and environment of another process that carries a marker (a stand-in for the
instructor's `bertcourse autograde --db-url ...`). It must reach nothing and score like a blank
submission; the helper processes next to student code (zygote, judge) must not carry the grader's
secrets in their environment either.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from bertcourse.course import load_course
from bertcourse.grading import Grader
from bertcourse.grading.sandbox import isolate

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "grading"
SOURCE = FIXTURE / "solutions" / "toy" / "toy.ipynb"
STUB = "# YOUR CODE HERE\nraise NotImplementedError()"
CMDLINE_MARKER = "cmdline-marker-5e1d0c"
ENV_MARKER = "postgresql://grader:env-marker-93ab27@db.example/gradebook"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only")


def _namespaces_work() -> bool:
    """Whether this kernel lets a process enter new namespaces (checked in a throwaway child)."""
    pid = os.fork()
    if pid == 0:
        os._exit(0 if isolate() is None else 1)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


needs_namespaces = pytest.mark.skipif(not _namespaces_work(), reason="this kernel refuses new namespaces: "
                                      "the sandbox notes it on every grade (tested below)")


@pytest.fixture
def doors(monkeypatch):
    """A TCP listener, a UDP socket and a process with markers in its command line and environment."""
    monkeypatch.setenv("BERTCOURSE_DB_URL", ENV_MARKER)  # as an instructor running a batch would have it
    tcp = socket.create_server(("127.0.0.1", 0))
    tcp.settimeout(0.5)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.settimeout(0.5)
    other = subprocess.Popen(["sh", "-c", "sleep 120", CMDLINE_MARKER], env={"SECRET": ENV_MARKER})
    # A service's named socket where services keep theirs (PostgreSQL: /run/postgresql); root only.
    unix_path = f"/run/bertcourse-probe-{os.getpid()}.sock"
    unix = socket.socket(socket.AF_UNIX)
    try:
        unix.bind(unix_path)
        unix.listen(1)
        unix.settimeout(0.5)
        os.chmod(unix_path, 0o777)
    except OSError:
        unix.close()
        unix, unix_path = None, ""
    # A named socket anywhere else (a server built to keep it in /tmp, an X server's /tmp/.X11-unix).
    tmp_unix_path = os.path.join(tempfile.mkdtemp(prefix="bertcourse-probe-"), "service.sock")
    os.chmod(os.path.dirname(tmp_unix_path), 0o755)
    tmp_unix = socket.socket(socket.AF_UNIX)
    tmp_unix.bind(tmp_unix_path)
    tmp_unix.listen(1)
    tmp_unix.settimeout(0.5)
    os.chmod(tmp_unix_path, 0o777)
    yield {"tcp": tcp.getsockname()[1], "udp": udp.getsockname()[1], "pids": [os.getpid(), other.pid],
           "unix": unix_path, "tcp_socket": tcp, "udp_socket": udp, "unix_socket": unix,
           "tmp_unix": tmp_unix_path, "tmp_unix_socket": tmp_unix}
    tmp_unix.close()
    shutil.rmtree(os.path.dirname(tmp_unix_path), ignore_errors=True)
    if unix is not None:
        unix.close()
        os.unlink(unix_path)
    other.kill()
    other.wait()
    tcp.close()
    udp.close()


def probe_source(doors: dict) -> str:
    """A cell that tries every door, sends what it found to the listener, and answers the concept
    question correctly only if it found a marker or reached the network."""
    return f"""
import os, socket
found = []
def note(what):
    found.append(what)
    print('reached', what[:60])
try:
    with socket.create_connection(('127.0.0.1', {doors['tcp']}), timeout=2) as conn:
        conn.sendall(b'probe')
        note('tcp')
except OSError as exc:
    print('tcp refused:', exc)
try:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as dgram:
        dgram.sendto(b'probe', ('127.0.0.1', {doors['udp']}))
except OSError as exc:
    print('udp refused:', exc)
if {doors['unix']!r}:
    try:
        with socket.socket(socket.AF_UNIX) as local:
            local.connect({doors['unix']!r})
            note('unix')
    except OSError as exc:
        print('unix refused:', exc)
try:
    with socket.socket(socket.AF_UNIX) as local:
        local.connect({doors['tmp_unix']!r})
        note('tmp unix')
except OSError as exc:
    print('tmp unix refused:', exc)
try:
    note('dns ' + str(socket.getaddrinfo('gradebook.bertcourse-probe.org', 5432)))
except OSError as exc:
    print('dns refused:', exc)
print('pids', sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))
targets = {doors['pids']!r} + [int(p) for p in os.listdir('/proc') if p.isdigit()]
for pid in targets:
    for part in ('cmdline', 'environ'):
        try:
            text = open(f'/proc/{{pid}}/{{part}}', 'rb').read().decode('latin1')
        except OSError:
            continue
        if {CMDLINE_MARKER!r} in text or 'env-marker' in text:
            note(f'{{part}} of {{pid}}: ' + text)
try:
    with socket.create_connection(('127.0.0.1', {doors['tcp']}), timeout=2) as conn:
        conn.sendall(repr(found).encode())
except OSError:
    pass
answer_q1 = 'b' if found else 'nothing'
"""


def probe_notebook(tmp_path: Path, doors: dict) -> Path:
    nb = json.loads(SOURCE.read_text())
    for cell in nb["cells"]:
        grade_id = cell["metadata"]["nbgrader"]["grade_id"]
        if grade_id in ("add", "mask"):
            cell["source"] = STUB
        elif grade_id == "concept":
            cell["source"] = probe_source(doors)
    path = tmp_path / "toy.ipynb"
    path.write_text(json.dumps(nb))
    return path


def assert_nothing_reached(doors: dict, output: str) -> None:
    tcp, udp = doors["tcp_socket"], doors["udp_socket"]
    with pytest.raises(TimeoutError):
        conn, _ = tcp.accept()
        conn.close()  # (only reached when the probe connected)
    with pytest.raises(TimeoutError):
        udp.recvfrom(100)
    if doors["unix_socket"] is not None:
        with pytest.raises(TimeoutError):
            doors["unix_socket"].accept()
        assert "unix refused" in output, output
    with pytest.raises(TimeoutError):
        doors["tmp_unix_socket"].accept()
    assert "tmp unix refused" in output, output
    assert "reached" not in output, output
    assert "tcp refused" in output and "udp refused" in output and "dns refused" in output, output
    listed = json.loads(output.split("pids ", 1)[1].splitlines()[0])
    assert not set(listed) & set(doors["pids"]), f"the worker sees outside processes: {listed}"


@needs_namespaces
def test_probe_reaches_nothing_and_scores_like_a_blank_submission(tmp_path, doors):
    with Grader(load_course(FIXTURE)) as grader:
        blank = grader.grade(_blank(tmp_path / "blank"), "toy")
        result = grader.grade(probe_notebook(tmp_path, doors), "toy")
        helpers = [grader._zygote.process.pid, grader._judge.process.pid]
        for pid in helpers:  # nothing next to student code carries the grader's secrets
            assert b"env-marker" not in Path(f"/proc/{pid}/environ").read_bytes()
    concept = next(c for c in result.cells if c.grade_id == "concept")
    assert concept.status == "ok", concept.error
    assert_nothing_reached(doors, concept.output)
    assert result.error is None and "sandbox-unavailable" not in {n.kind for n in result.notes}
    assert (result.score, blank.score) == (0.0, 0.0)


def _blank(tmp_path: Path) -> Path:
    nb = json.loads(SOURCE.read_text())
    for cell in nb["cells"]:
        if cell["metadata"]["nbgrader"]["grade_id"] in ("add", "mask", "concept"):
            cell["source"] = STUB
    tmp_path.mkdir(exist_ok=True)
    path = tmp_path / "blank.ipynb"
    path.write_text(json.dumps(nb))
    return path


@needs_namespaces
@pytest.mark.slow
def test_probe_through_the_grade_command(tmp_path, doors, monkeypatch, capsys):
    from bertcourse.cli import main

    monkeypatch.setenv("BERTCOURSE_ROOT", str(FIXTURE))
    assert main(["grade", str(probe_notebook(tmp_path, doors)), "--exercise", "toy"]) == 0
    out = capsys.readouterr().out
    assert "score: 0/5" in out, out
    tcp, udp = doors["tcp_socket"], doors["udp_socket"]
    with pytest.raises(TimeoutError):
        tcp.accept()
    with pytest.raises(TimeoutError):
        udp.recvfrom(100)


@pytest.mark.slow
def test_without_namespaces_the_grade_says_so_or_is_refused(tmp_path, monkeypatch):
    """Where the kernel refuses namespaces, `auto` grades with a note and `require` refuses (fail closed).
    A kernel that refuses is simulated in the zygote with a sitecustomize module on its PYTHONPATH."""
    (tmp_path / "sitecustomize.py").write_text(
        "import bertcourse.grading.sandbox as sandbox\n"
        "sandbox.isolate = lambda: 'the kernel refused new namespaces (simulated)'\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    course = load_course(FIXTURE)
    with Grader(course) as grader:
        result = grader.grade(SOURCE, "toy")
    assert result.score == 5.0
    assert any(n.kind == "sandbox-unavailable" and "simulated" in n.message for n in result.notes)
    with Grader(course, sandbox="require") as grader:
        refused = grader.grade(SOURCE, "toy")
    assert refused.score == 0.0 and refused.error and "sandbox is required" in refused.error


# ----------------------------------------------------------------------------- secrets stay off command lines


def test_a_password_on_the_command_line_gets_a_warning_and_a_file_or_the_environment_none(tmp_path):
    from bertcourse.grading.batch.autograde import BatchError, resolve_db_url

    said: list[str] = []
    url = "postgresql://grader:pw-on-argv-1234@db.example/gradebook"
    assert resolve_db_url(url, None, said.append) == url
    assert len(said) == 1 and "password" in said[0] and "--db-url-file" in said[0] and "pw-on-argv" not in said[0]
    said.clear()
    assert resolve_db_url("postgresql://grader@db.example/gradebook", None, said.append)
    assert resolve_db_url(None, None, said.append) is None and said == []  # then $BERTCOURSE_DB_URL or default
    secret_file = tmp_path / "db-url"
    secret_file.write_text("# the course team's gradebook\n" + url + "\n")
    assert resolve_db_url(None, str(secret_file), said.append) == url and said == []
    secret_file.write_text("\n")
    with pytest.raises(BatchError, match="db-url.*expected one line"):
        resolve_db_url(None, str(secret_file), said.append)
    with pytest.raises(BatchError, match="cannot read it"):
        resolve_db_url(None, str(tmp_path / "missing"), said.append)
    from bertcourse.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["autograde", "submitted", "--db-url", url, "--db-url-file", str(secret_file)])


def test_the_password_is_redacted_in_errors_and_reports(tmp_path, capsys):
    from bertcourse.grading.batch.gradebook import GradebookError, open_gradebook, redact

    url = "postgresql://grader:pw-in-a-report-1234@127.0.0.1:1/gradebook"
    assert redact(f"cannot reach {url}", url) == "cannot reach postgresql://grader:***@127.0.0.1:1/gradebook"
    assert redact("sqlite:///x.db", "sqlite:///x.db") == "sqlite:///x.db"
    with pytest.raises(GradebookError) as failure:
        with open_gradebook(url):
            pass
    assert "pw-in-a-report" not in str(failure.value) and "grader:***@" in str(failure.value)
    assert failure.value.__cause__ is None  # the driver's own exception (which may quote the URL) is not chained
