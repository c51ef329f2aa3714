import re,sys,collections
lines=[l.rstrip('\n') for l in open(sys.argv[1]).readlines()[2:]]
def op(s): s=re.sub(r'^@!?U?P\w+\s+','',s); return s.split()[0]
cats=collections.OrderedDict()
def add(c,l): cats.setdefault(c,[]).append(l)
ring_regs=set(sys.argv[2].split(',')) if len(sys.argv)>2 else set()
for l in lines:
    a,_,s=l.split(None,2); s=s.split(None,0)[0] if False else l[16:]
    o=op(s)
    if o.startswith('HMMA'): add('mma',l)
    elif o.startswith('HMUL2'): add('scale multiply (HMUL2)',l)
    elif '0x81c081c0' in s or '0x6c006c' in s or '0x421' in s or re.search(r'IMAD.SHL.U32 R\d+, R\d+(\.reuse)?, 0x(8|40), RZ',s) or re.search(r'SHF.R.U32.HI R\d+, RZ, 0x8, ',s): add('dequant (bit ops)',l)
    elif o.startswith(('LDS','LDG','LDGSTS','DEPBAR','LDGDEPBAR')): add('loads/async',l)
    else: add('other',l)
for k,v in cats.items(): print(k,len(v))
print('--- other:')
for l in cats['other']: print(l)
