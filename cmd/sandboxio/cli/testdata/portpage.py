# A page, a WebSocket echo and server-sent events, with Python's standard
# library only (the sandbox image has nothing else), on asyncio so that a
# thousand connections need no thread each: GET / serves a page that opens
# a WebSocket to ./ws, sends a message and shows what comes back; GET
# .../ws upgrades and echoes every message; GET .../sse sends three
# server-sent events 0.2 s apart. HTTP/1.1 with keep-alive.
# Usage: python3 portpage.py PORT
import asyncio
import base64
import hashlib
import struct
import sys

PAGE = b"""<!doctype html>
<html><head><title>sandbox page</title></head>
<body>
<h1>served from a sandbox</h1>
<div id="status">waiting for the websocket</div>
<div id="events">waiting for the events</div>
<script>
// A fetch in flight holds headless Chromium's virtual time (--virtual-time-budget)
// while the WebSocket's round trip happens; the events read show that streaming works.
fetch("sse").then(r => r.text()).then(t => {
  document.getElementById("events").textContent = "events: " + (t.split("data:").length - 1);
});
const url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host +
  location.pathname.replace(/[^/]*$/, "") + "ws";
const ws = new WebSocket(url);
ws.onopen = () => ws.send("hello through the gateway");
ws.onmessage = (e) => { document.getElementById("status").textContent = "received: " + e.data; ws.close(); };
ws.onerror = () => { document.getElementById("status").textContent = "websocket error"; };
</script>
</body></html>
"""

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


async def echo(reader, writer):
    while True:
        h = await reader.readexactly(2)
        op, n = h[0] & 0x0F, h[1] & 0x7F
        if n == 126:
            n = struct.unpack(">H", await reader.readexactly(2))[0]
        elif n == 127:
            n = struct.unpack(">Q", await reader.readexactly(8))[0]
        mask = await reader.readexactly(4) if h[1] & 0x80 else b"\0\0\0\0"
        data = bytes(b ^ mask[i % 4] for i, b in enumerate(await reader.readexactly(n)))
        if op == 8:
            writer.write(b"\x88\x00")
            await writer.drain()
            return
        if op == 9:
            op = 10
        if n < 126:
            hdr = bytes([0x80 | op, n])
        elif n < 65536:
            hdr = bytes([0x80 | op, 126]) + struct.pack(">H", n)
        else:
            hdr = bytes([0x80 | op, 127]) + struct.pack(">Q", n)
        writer.write(hdr + data)
        await writer.drain()


async def handle(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            path = lines[0].split(" ")[1].split("?")[0]
            headers = {}
            for line in lines[1:]:
                if ":" in line:
                    k, v = line.split(":", 1)
                    headers[k.strip().lower()] = v.strip()
            if path.endswith("/ws") and headers.get("upgrade", "").lower() == "websocket":
                accept = base64.b64encode(hashlib.sha1(headers["sec-websocket-key"].encode() + GUID).digest())
                writer.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                             b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n")
                await writer.drain()
                await echo(reader, writer)
                return
            if path.endswith("/sse"):
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\n"
                             b"Connection: close\r\n\r\n")
                for i in range(3):
                    writer.write(b"data: event %d\n\n" % i)
                    await writer.drain()
                    await asyncio.sleep(0.2)
                return
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: %d\r\n\r\n"
                         % len(PAGE) + PAGE)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, IndexError, KeyError, asyncio.LimitOverrunError):
        pass
    finally:
        writer.close()


async def main(port):
    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


asyncio.run(main(int(sys.argv[1])))
