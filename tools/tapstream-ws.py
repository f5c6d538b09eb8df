#!/usr/bin/env python3
"""A small client of tapstream's websocket API (docs/api.md), standard library only.

  tools/tapstream-ws.py [--url ws://127.0.0.1:8790/ws] [--token T] REQUEST [JSON-FIELDS]
  tools/tapstream-ws.py get_state
  tools/tapstream-ws.py set_volume '{"channel": "master", "db": -6}'
  tools/tapstream-ws.py --meters 5 subscribe_meters '{"interval_ms": 50}'   # prints 5 pushes

Prints each reply (and pushed event) as one line of JSON; exits 1 when a reply says ok=false.
"""
import argparse
import base64
import json
import os
import socket
import struct
import sys
import urllib.parse


class WebSocket:
    """Just enough of RFC 6455 for text messages from a client."""

    def __init__(self, url, token=None, timeout=10.0):
        parts = urllib.parse.urlsplit(url)
        path = parts.path or "/ws"
        if token:
            path += "?token=" + urllib.parse.quote(token)
        self.sock = socket.create_connection((parts.hostname, parts.port or 80), timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        # The server answers only its own names (Host): an IPv6 address in brackets.
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        self.sock.sendall(
            (f"GET {path} HTTP/1.1\r\nHost: {host}:{parts.port or 80}\r\n"
             "Upgrade: websocket\r\nConnection: Upgrade\r\n"
             f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("closed during the handshake")
            head += chunk
        status = head.split(b"\r\n", 1)[0].decode()
        if " 101 " not in status:
            raise ConnectionError(f"handshake refused: {head.decode(errors='replace').strip()}")
        self.buffer = head.split(b"\r\n\r\n", 1)[1]

    def send(self, text):
        self._send_frame(0x1, text.encode())

    def _send_frame(self, opcode, data):
        header = bytes([0x80 | opcode])
        if len(data) < 126:
            header += bytes([0x80 | len(data)])
        elif len(data) < 65536:
            header += bytes([0x80 | 126]) + struct.pack(">H", len(data))
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", len(data))
        mask = os.urandom(4)
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _read(self, n):
        while len(self.buffer) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("connection closed")
            self.buffer += chunk
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def receive(self):
        message = b""
        while True:
            first, second = self._read(2)
            length = second & 0x7F
            if length == 126:
                length = struct.unpack(">H", self._read(2))[0]
            elif length == 127:
                length = struct.unpack(">Q", self._read(8))[0]
            payload = self._read(length)
            opcode = first & 0x0F
            if opcode == 0x8:
                raise ConnectionError("server closed the connection")
            if opcode == 0x9:  # the server's keep-alive: unanswered, it closes the connection
                self._send_frame(0xA, payload)
                continue
            if opcode == 0xA:
                continue
            message += payload
            if first & 0x80:
                return message.decode()

    def request(self, body):
        self.send(json.dumps(body))
        while True:
            reply = json.loads(self.receive())
            if "event" not in reply:
                return reply


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="ws://127.0.0.1:8790/ws")
    parser.add_argument("--token")
    parser.add_argument("--meters", type=int, default=0, help="then print this many meter pushes")
    parser.add_argument("request")
    parser.add_argument("fields", nargs="?", default="{}")
    args = parser.parse_args()
    ws = WebSocket(args.url, args.token)
    reply = ws.request({"id": 1, "request": args.request, **json.loads(args.fields)})
    print(json.dumps(reply))
    for _ in range(args.meters):
        print(ws.receive())
    return 0 if reply.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
