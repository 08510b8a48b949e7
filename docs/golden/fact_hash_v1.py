#!/usr/bin/env python3
"""An independent implementation of convo's fact encoding v1 (docs/HASHING.md).

Prints the golden vectors that convo_core::fact::tests::golden_vectors pins.
"""
import hashlib
import struct
import uuid


def lp(b: bytes) -> bytes:
    return struct.pack("<Q", len(b)) + b


def opt(x):
    return b"\x00" if x is None else b"\x01" + x


def fact(prev, after, typ, body):
    return b"convo.fact.v1" + opt(prev) + struct.pack("<Q", after) + bytes([typ]) + body


session = uuid.UUID("00000000-0000-4000-8000-000000000001").bytes
s = fact(None, 0, 1, session + lp(b"researcher") + opt(lp(b"Paris")) + struct.pack("<q", 1770993005000))
s_hash = hashlib.sha256(s).digest()
print("session fact", s_hash.hex())
state = hashlib.sha256(b"state").digest()
st = fact(s_hash, 1, 2, session + lp(b"main") + opt(state))
print("state fact  ", hashlib.sha256(st).hexdigest())
st_hash = hashlib.sha256(st).digest()
payload = hashlib.sha256(b"Tell me about Paris").digest()
rd = fact(st_hash, 2, 4, payload + struct.pack("<q", 1770993200000) + lp(b"alice") + lp(b"personal data"))
print("redaction   ", hashlib.sha256(rd).hexdigest())
rd_hash = hashlib.sha256(rd).digest()
rp = fact(rd_hash, 2, 5, session + lp(b"main") + struct.pack("<q", 1770993300000) + struct.pack("<QQQQ", 9, 2, 0, 1))
print("replay      ", hashlib.sha256(rp).hexdigest())
