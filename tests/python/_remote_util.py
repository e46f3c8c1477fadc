"""Servers for the remote-dataset tests: nginx (Debian nginx-light) on 127.0.0.1 over a
temporary directory, and a small fault-injecting HTTP server (404, 500s, resets mid-body,
a slow body, a file replaced between reads) for what nginx cannot do."""
import contextlib
import email.utils
import hashlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def _die_with_parent():
    """In the child before exec: SIGTERM when the parent (the test process) dies."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, 15)   # PR_SET_PDEATHSIG, SIGTERM
    except (OSError, AttributeError):
        pass


class Nginx:
    """nginx serving root on 127.0.0.1:<free port>; pid, logs and temp dirs under work."""

    def __init__(self, root, work):
        if NGINX is None:
            raise RuntimeError("nginx is not installed (apt-get install nginx-light; "
                               "scripts/install-deps.sh installs it)")
        self.root, self.work = str(root), str(work)
        self.proc = None
        os.makedirs(self.work, exist_ok=True)
        last = None
        for _ in range(5):
            self.port = free_port()
            conf = os.path.join(self.work, "nginx.conf")
            w = self.work
            # run as root (CI containers), nginx's workers would drop to "nobody", who cannot
            # read pytest's private temporary directories: keep the workers' user ours
            user = f"user {pwd.getpwuid(os.geteuid()).pw_name};\n" if os.geteuid() == 0 else ""
            with open(conf, "w") as f:
                f.write(user + f"""daemon off;
worker_processes 1;
pid {w}/nginx.pid;
error_log {w}/error.log warn;
events {{ worker_connections 64; }}
http {{
  log_format dc '$connection $status $body_bytes_sent "$http_range" "$http_user_agent"';
  access_log {w}/access.log dc;
  client_body_temp_path {w}/body; proxy_temp_path {w}/proxy; fastcgi_temp_path {w}/fcgi;
  uwsgi_temp_path {w}/uwsgi; scgi_temp_path {w}/scgi;
  keepalive_requests 100000;
  server {{
    listen 127.0.0.1:{self.port};
    root {self.root};
    location / {{ }}
  }}
}}
""")
            # in the foreground, a child of this process that dies with it (PR_SET_PDEATHSIG):
            # a test run that is killed leaves no nginx behind
            self.proc = subprocess.Popen([NGINX, "-c", conf, "-p", self.work, "-e", f"{w}/error.log"],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent)
            if self._up():
                return
            last = self._log()
            self.stop()
        raise RuntimeError(f"nginx did not start: {last.strip()[-400:]}")

    def _log(self):
        try:
            return open(os.path.join(self.work, "error.log")).read()
        except OSError:
            return ""

    def _up(self):
        for _ in range(100):
            if self.proc.poll() is not None:
                return False
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return True
            except OSError:
                time.sleep(0.05)
        return False

    def url(self, name):
        return f"http://127.0.0.1:{self.port}/{name}"

    def requests(self):
        """The access log's lines."""
        try:
            return open(os.path.join(self.work, "access.log")).read().splitlines()
        except OSError:
            return []

    def stop(self):
        p = getattr(self, "proc", None)
        if p is None or p.poll() is not None:
            return
        p.terminate()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=10)


def http_server(get, head=None):
    """A threaded HTTP/1.1 server on 127.0.0.1, a free port, serving in a daemon thread: GET
    calls get(handler), HEAD head(handler).  Returns (server, port); server.shutdown() and
    server.server_close() stop it."""
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_GET(self):
            get(self)

        def do_HEAD(self):
            if head is None:
                self.send_error(501)
            else:
                head(self)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, httpd.server_address[1]


def nginx_or_skip(www, workdir):
    """An Nginx over www, or the test skipped with the reason it cannot start here."""
    import pytest   # here: bench/bench_remote.py imports this module without pytest
    try:
        return Nginx(www, workdir)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        pytest.skip(f"nginx cannot start here: {e}")


@contextlib.contextmanager
def fault_server(tmp_path, src, name):
    """A FaultServer over a directory holding a copy of src as `name`."""
    www = tmp_path / "faults"
    www.mkdir()
    shutil.copy(src, www / name)
    s = FaultServer(www)
    try:
        yield s
    finally:
        s.stop()


class FaultServer:
    """Serves files of root with Range support, and faults set per path in self.faults:
       {"status": 404}                          always that status
       {"fail_first": n, "status": 500}         n failures then success
       {"reset_first": n}                       n responses cut mid-body (connection closed)
       {"slow_s": s}                            sleeps s seconds before the body
       "from_byte": k with any of these         only requests whose range starts at byte k or
                                                later (counted apart for fail_first/reset_first)
       {"no_validators": True}                  no ETag and no Last-Modified
    self.replace(name, data) swaps the file (new ETag and Last-Modified)."""

    def __init__(self, root):
        self.root = str(root)
        self.faults = {}
        self.count = {}
        self.lock = threading.Lock()
        self.versions = {}
        self.httpd, self.port = http_server(self._serve)

    def url(self, name):
        return f"http://127.0.0.1:{self.port}/{name}"

    def replace(self, name, data):
        with open(os.path.join(self.root, name), "wb") as f:
            f.write(data)
        with self.lock:
            self.versions[name] = self.versions.get(name, 0) + 1

    def _serve(self, h):
        name = h.path.lstrip("/").split("?")[0]
        rng = h.headers.get("Range", "")
        with self.lock:
            n = self.count[name] = self.count.get(name, 0) + 1
            fault = dict(self.faults.get(name, {}))
            ver = self.versions.get(name, 0)
            if "from_byte" in fault:
                start = int(rng[6:].split("-")[0]) if rng.startswith("bytes=") else 0
                if start < fault["from_byte"]:
                    fault = {}
                else:
                    n = self.count[name, "from"] = self.count.get((name, "from"), 0) + 1
        if "status" in fault and ("fail_first" not in fault or n <= fault["fail_first"]):
            body = b"fault\n"
            h.send_response(fault["status"])
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)
            return
        try:
            data = open(os.path.join(self.root, name), "rb").read()
        except OSError:
            h.send_response(404)
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        etag = '"%s-%d"' % (hashlib.sha1(data).hexdigest()[:12], ver)
        lm = email.utils.formatdate(1700000000 + ver, usegmt=True)
        start, end = 0, len(data) - 1
        status = 200
        if rng.startswith("bytes="):
            a, b = rng[6:].split("-")
            start, end = int(a), min(int(b), len(data) - 1)
            status = 206
        body = data[start:end + 1]
        h.send_response(status)
        if not fault.get("no_validators"):
            h.send_header("ETag", etag)
            h.send_header("Last-Modified", lm)
        h.send_header("Content-Length", str(len(body)))
        if status == 206:
            h.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        h.end_headers()
        if fault.get("slow_s"):
            time.sleep(fault["slow_s"])
        if fault.get("reset_first") and n <= fault["reset_first"]:
            h.wfile.write(body[:len(body) // 2])
            h.wfile.flush()
            h.connection.shutdown(socket.SHUT_RDWR)
            h.close_connection = True
            return
        h.wfile.write(body)

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def reset_vfs_counters(path):
    """Zeroes the dchttp VFS's counters, which are the process's (a connection to any dataset
    reaches them): a test file whose refused reads count as errors resets them when it is done,
    for the files run after it in one process."""
    import deltacells   # here: bench/bench_remote.py imports this module before the package's path is set
    con = deltacells.connect(path)
    try:
        con.execute("SELECT dc_vfs_stats('reset')").fetchall()
    finally:
        con.close()


@contextlib.contextmanager
def alarm(seconds, what):
    """Fails the code inside after `seconds` (SIGALRM) instead of letting it hang."""
    def expired(*_):
        raise TimeoutError(f"{what}: a test ran over its {seconds} s limit")
    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def settle(cond, what, limit=20.0, quiet=0.0):
    """Waits until cond() holds (a loaded machine may take its time; fails with `what` after
    `limit` seconds), then `quiet` seconds more, so that a check after it also sees anything a
    thread did beyond what was waited for."""
    deadline = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)
    time.sleep(quiet)


def wait_child(pid, seconds):
    """The exit status of forked child `pid`; kills it and fails the test if it has not
    exited within `seconds` (a hang)."""
    deadline = time.monotonic() + seconds
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            raise AssertionError("the forked child hung")
        time.sleep(0.05)
