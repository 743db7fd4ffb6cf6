import sys, statistics, collections
d=collections.defaultdict(list)
for l in open(sys.argv[1]):
    p=l.split()
    if len(p)<4: continue
    try: d[(int(p[0]),p[1],int(p[2]))].append(float(p[3]))
    except: pass
for np_ in (2,4):
    algos=sorted({k[1] for k in d if k[0]==np_}, key=lambda a:(a.startswith('ompi'),a))
    print(f"N={np_} median busbw (GB/s); ratio = auto/ompi, best/ompi")
    print("size | "+" | ".join(a[:8] for a in algos)+" | auto/ompi | best/ompi")
    for s in sorted({k[2] for k in d if k[0]==np_}):
        m={a:statistics.median(d[(np_,a,s)]) for a in algos if d[(np_,a,s)]}
        g=[a for a in m if not a.startswith('ompi')]
        best=max(g,key=lambda a:m[a])
        print(f"{s>>10}K | "+" | ".join(f"{m.get(a,0):.2f}" for a in algos)+f" | {m['auto']/m['ompi']:.2f} | {m[best]/m['ompi']:.2f} {best[:6]}")
