#!/usr/bin/env python3
"""sandboxio from Python with nothing but a socket.

This speaks the NATS client protocol (INFO, CONNECT, SUB, PUB, HMSG) by hand
to show that the sandboxio protocol needs no SDK: requests are JSON on
sbx.api.v1.<op>, errors come back in the Nats-Service-Error-Code header with
an {"error": {...}} body, and a streamed process's output can be followed on
the core subject sbx.live.<tenant>.<sandbox>.<process>.<stream> (subscribe
before the exec, with a process id you choose, and nothing is missed). The
tenant token is what the quota op says ("_" on an open deployment). After
the exit it asks the router to replay the stored output (attach) to a
subject of its own, as a late reader without JetStream does. A real program
would use nats-py; see docs/protocol.md.

    python3 examples/python/sandboxio_raw.py [nats://[user:password@]127.0.0.1:4222] [class] -- CMD...

A user and password (or a token, nats://token@host:port) in the URL are sent
in CONNECT; creds files (JWT + nkey signature) need ed25519, which the
standard library lacks: use nats-py for those.

It prints one JSON object per line: the tenant, the create reply, each
output chunk, the exit marker, the replay count, the kill reply.
"""
import json
import os
import secrets
import socket
import sys
import time


class NATS:
    def __init__(self, url="nats://127.0.0.1:4222"):
        hostport = url.replace("nats://", "")
        auth = {}
        if "@" in hostport:
            cred, hostport = hostport.rsplit("@", 1)
            if ":" in cred:
                auth["user"], auth["pass"] = cred.split(":", 1)
            else:
                auth["auth_token"] = cred
        host, port = hostport.split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.buf = b""
        self.sid = 0
        self.inbox = "_INBOX." + secrets.token_hex(8)
        info = self._line()
        if not info.startswith(b"INFO "):
            raise RuntimeError("not a NATS server: %r" % info)
        connect = {"verbose": False, "pedantic": False, "headers": True, "no_responders": True,
                   "lang": "python-raw", "version": "0", **auth}
        self._send(b"CONNECT " + json.dumps(connect).encode() + b"\r\nPING\r\n")
        while True:
            line = self._line()
            if line == b"PONG":
                break
            if line.startswith(b"-ERR"):
                raise RuntimeError(line.decode())
        self.inbox_sid = self.subscribe(self.inbox + ".*")
        self.pending = []

    def _send(self, data):
        self.sock.sendall(data)

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise RuntimeError("connection closed")
        self.buf += chunk

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _take(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def subscribe(self, subject):
        self.sid += 1
        self._send(b"SUB %s %d\r\n" % (subject.encode(), self.sid))
        return self.sid

    def publish(self, subject, payload, reply=None):
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        rep = b" " + reply.encode() if reply else b""
        self._send(b"PUB %s%s %d\r\n%s\r\n" % (subject.encode(), rep, len(body), body))

    def next_msg(self):
        """Returns (subject, sid, headers, data) of the next message."""
        while True:
            line = self._line()
            if line == b"PING":
                self._send(b"PONG\r\n")
                continue
            if line.startswith(b"-ERR"):
                raise RuntimeError(line.decode())
            parts = line.split(b" ")
            if parts[0] == b"MSG":
                size = int(parts[-1])
                return parts[1].decode(), int(parts[2]), {}, self._take(size)
            if parts[0] == b"HMSG":
                hsize, total = int(parts[-2]), int(parts[-1])
                raw = self._take(total)
                headers = {}
                head_lines = raw[:hsize].decode().split("\r\n")
                status = head_lines[0][len("NATS/1.0"):].strip()
                if status:
                    headers[":status"] = status
                for h in head_lines[1:]:
                    if ": " in h:
                        k, v = h.split(": ", 1)
                        headers[k] = v
                return parts[1].decode(), int(parts[2]), headers, raw[hsize:]

    def request(self, subject, payload, timeout=60):
        token = secrets.token_hex(4)
        self.publish(subject, payload, reply=self.inbox + "." + token)
        deadline = time.time() + timeout
        while time.time() < deadline:
            subj, sid, headers, data = self.next_msg()
            if sid == self.inbox_sid and subj.endswith(token):
                if headers.get(":status", "").startswith("503"):
                    raise RuntimeError("no responders on " + subject)
                return headers, data
            self.pending.append((subj, sid, headers, data))
        raise TimeoutError(subject)


def call(nc, op, payload):
    headers, data = nc.request("sbx.api.v1." + op, payload)
    body = json.loads(data)
    if "Nats-Service-Error-Code" in headers:
        return None, body["error"]
    return body, None


def main(argv):
    url, klass, cmd = "nats://127.0.0.1:4222", None, ["sh", "-c", "echo hello from python"]
    if "--" in argv:
        i = argv.index("--")
        argv, cmd = argv[:i], argv[i + 1:]
    if argv:
        url = argv[0]
    if len(argv) > 1:
        klass = argv[1]
    out = lambda obj: print(json.dumps(obj), flush=True)

    nc = NATS(url)
    _, err = call(nc, "create", {"timeout_s": 60, "sandbox_id": "Bad.Id"})
    out({"bad_request_code": err["code"]})

    # Who the server says we are: the tenant token of our subjects.
    try:
        quota, err = call(nc, "quota", {})
        tenant = quota["tenant"] if quota else "_"
    except RuntimeError:  # an older router: no quota op, an open deployment
        tenant = "_"
    out({"tenant": tenant})

    req = {"timeout_s": 60}
    if klass:
        req["class"] = klass
    created, err = call(nc, "create", req)
    if err:
        out({"error": err})
        return 2
    out({"created": created})
    sandbox = created["sandbox_id"]

    # Choose the process id, subscribe to its live output, then start it.
    process = "py" + secrets.token_hex(6)
    live_sid = nc.subscribe("sbx.live.%s.%s.%s.>" % (tenant, sandbox, process))
    reply, err = call(nc, "exec", {"sandbox_id": sandbox, "cmd": cmd, "stream": True, "process_id": process})
    if err:
        out({"error": err})
        return 2
    out({"stream": reply})
    exit_result = None
    while exit_result is None:
        if nc.pending:
            subj, sid, headers, data = nc.pending.pop(0)
        else:
            subj, sid, headers, data = nc.next_msg()
        if sid != live_sid:
            continue
        stream = subj.rsplit(".", 1)[1]
        if stream == "exit":
            exit_result = json.loads(data)
            out({"exit": exit_result, "exit_code_header": headers.get("Sbx-Exit-Code")})
        else:
            out({"chunk": stream, "seq": int(headers.get("Sbx-Seq", "0")), "data": data.decode("utf-8", "replace")})

    # A late reader: subscribe to a replay subject of our own, then attach.
    nonce = "py" + secrets.token_hex(8)
    replay_sid = nc.subscribe("sbx.replay.%s.%s" % (tenant, nonce))
    attached, err = call(nc, "attach", {"sandbox_id": sandbox, "process_id": process, "nonce": nonce})
    if err:
        out({"error": err})
        return 2
    replayed = 0
    while True:
        if nc.pending:
            subj, sid, headers, data = nc.pending.pop(0)
        else:
            subj, sid, headers, data = nc.next_msg()
        if sid != replay_sid:
            continue
        if "Sbx-Replay-End" in headers:
            break
        replayed += 1  # headers["Sbx-Subject"] is the stored subject, Sbx-Seq as live
    out({"replayed": replayed, "stored": attached["stored"]})

    killed, err = call(nc, "kill", {"sandbox_id": sandbox})
    out({"killed": killed, "error": err})
    return 0 if exit_result.get("exit_code") == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
