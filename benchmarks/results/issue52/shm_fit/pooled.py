# Median busbw per size over every run of every report in this folder (run1..run4), gsync against
# Open MPI's default (vader), and the ratio of the medians.
import glob, statistics, collections, os
here = os.path.dirname(os.path.abspath(__file__))
d = collections.defaultdict(list)
for f in glob.glob(os.path.join(here, 'run*', 'raw_shm', '*_np*_r*.log')):
    tool, np_ = os.path.basename(f).split('_')[:2]
    if tool not in ('gsync', 'ompi'): continue
    for l in open(f):
        p = l.split()
        if not p or p[0].startswith('#') or len(p) < 9: continue
        try: d[(tool, int(np_[2:]), int(p[0]))].append(float(p[7]))
        except ValueError: pass
for np_ in (2, 4):
    print(f"N = {np_}: size KiB | runs | gsync median busbw | ompi median busbw | ratio")
    for s in sorted({k[2] for k in d if k[1] == np_}):
        g, o = d[('gsync', np_, s)], d[('ompi', np_, s)]
        print(f"  {s >> 10} | {len(g)}/{len(o)} | {statistics.median(g):.2f} | {statistics.median(o):.2f} | {statistics.median(g) / statistics.median(o):.2f}")
