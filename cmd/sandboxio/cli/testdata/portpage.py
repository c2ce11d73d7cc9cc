# A page and a WebSocket echo, with Python's standard library only (the
# sandbox image has nothing else): GET / serves a page that opens a
# WebSocket to ./ws, sends a message and shows what comes back; GET /ws
# upgrades and echoes every message; GET /sse sends three server-sent
# events. Usage: python3 portpage.py PORT
import base64
import hashlib
import http.server
import struct
import sys
import time

PAGE = b"""<!doctype html>
<html><head><title>sandbox page</title></head>
<body>
<h1>served from a sandbox</h1>
<div id="status">waiting for the websocket</div>
<script>
const url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host +
  location.pathname.replace(/[^/]*$/, "") + "ws";
const ws = new WebSocket(url);
ws.onopen = () => ws.send("hello through the gateway");
ws.onmessage = (e) => { document.getElementById("status").textContent = "received: " + e.data; ws.close(); };
ws.onerror = () => { document.getElementById("status").textContent = "websocket error"; };
</script>
</body></html>
"""

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path.split("?")[0].endswith("/ws") and self.headers.get("Upgrade", "").lower() == "websocket":
            key = self.headers["Sec-WebSocket-Key"]
            accept = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
            self.send_response(101)
            self.send_header("Upgrade", "websocket")
            self.send_header("Connection", "Upgrade")
            self.send_header("Sec-WebSocket-Accept", accept)
            self.end_headers()
            self.wfile.flush()
            self.echo()
            self.close_connection = True
            return
        if self.path.startswith("/sse"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-store")
            self.send_header("Connection", "close")
            self.end_headers()
            for i in range(3):
                self.wfile.write(b"data: event %d\n\n" % i)
                self.wfile.flush()
                time.sleep(0.2)
            self.close_connection = True
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def echo(self):
        r, w = self.rfile, self.wfile
        while True:
            h = r.read(2)
            if len(h) < 2:
                return
            op, n = h[0] & 0x0F, h[1] & 0x7F
            if n == 126:
                n = struct.unpack(">H", r.read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", r.read(8))[0]
            mask = r.read(4) if h[1] & 0x80 else b"\0\0\0\0"
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(r.read(n)))
            if op == 8:
                w.write(b"\x88\x00")
                w.flush()
                return
            if op == 9:
                op = 10
            if n < 126:
                hdr = bytes([0x80 | op, n])
            elif n < 65536:
                hdr = bytes([0x80 | op, 126]) + struct.pack(">H", n)
            else:
                hdr = bytes([0x80 | op, 127]) + struct.pack(">Q", n)
            w.write(hdr + data)
            w.flush()


http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
