# Independent implementation of convo node-hash v1 (docs/HASHING.md); prints the golden vectors.
import hashlib, struct, uuid
def lp(b): return struct.pack('<Q', len(b)) + b
def opt(x): return b'\x00' if x is None else b'\x01' + x
H=lambda b: hashlib.sha256(b).digest()
ses=uuid.UUID('00000000-0000-4000-8000-000000000001').bytes
p=b'Tell me about Paris'
sub=H(b'convo.submission.v1'+H(p)+ses+opt(None))
def node(parent,kind,sub,seq,frm,to,payload,diag,state,t,event):
    e=b'convo.node.v1'+opt(parent)+bytes([kind])+ses+opt(sub)+opt(None if seq is None else struct.pack('<I',seq))
    e+=lp(frm)+lp(to)+H(payload)+struct.pack('<Q',len(payload))+lp(diag)+opt(state)+struct.pack('<q',t)
    e+=opt(event)
    return H(e)
inv=node(None,1,sub,None,b'cli',b'researcher',p,b'{}',None,1770993005000,None)
print('submission',sub.hex()); print('invoke',inv.hex())
c=node(inv,4,sub,None,b'researcher',b'cli',b'Paris is the capital of France.',b'{"model":"m","tokens":{"in":4,"out":9}}',H(b'state'),1770993047000,None)
print('complete',c.hex())
f=node(inv,5,None,None,b'platform',b'researcher',b'',b'{}',None,1770993100000,lp(b'fix')+opt(None)+bytes([7]*16))
print('fork',f.hex())
