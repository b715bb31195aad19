"""The resources of a multi-node launch as DeepSpeed's launcher reads them (deepspeed/launcher/runner.py): an
MPI-style hostfile (`worker-0 slots=4` a line, # comments) filtered by --include / --exclude
(NODE_SPEC[@NODE_SPEC...], NODE_SPEC = NAME[:SLOT[,SLOT...]]), then cut to the first --num_nodes hosts and each
host's first --num_gpus slots. zoffload.launcher hands the result to mpirun or torchrun."""
import collections
import re

DEFAULT_HOSTFILE = "/job/hostfile"  # DeepSpeed's default (DLTS_HOSTFILE)

_LINE = re.compile(r"^(\S+)\s+slots\s*=\s*(\d+)\s*$")


class HostfileError(ValueError):
    """A hostfile or a resource filter that cannot be used; the message names the file and line, or the flag."""


def read_hostfile(path):
    """{host: slots} in the file's order, from the MPI-style hostfile at @path. HostfileError naming the file and
    line for a line that is not `NAME slots=N` (N >= 1), a host given twice, or a file without hosts; OSError when
    it cannot be read."""
    with open(path) as f:
        lines = f.read().splitlines()
    hosts = collections.OrderedDict()
    for no, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = _LINE.match(line)
        if not m or int(m.group(2)) < 1:
            raise HostfileError("%s:%d: %r: expected `HOSTNAME slots=N` with N >= 1" % (path, no, raw.strip()))
        if m.group(1) in hosts:
            raise HostfileError("%s:%d: host %s given twice" % (path, no, m.group(1)))
        hosts[m.group(1)] = int(m.group(2))
    if not hosts:
        raise HostfileError("%s: no hosts (a line `HOSTNAME slots=N` each)" % path)
    return hosts


def _parse_spec(text, flag, hosts):
    """{host: [slots] or None (every slot)} from the NODE_SPEC@NODE_SPEC text of @flag, checked against @hosts."""
    out = collections.OrderedDict()
    for spec in text.split("@"):
        spec = spec.strip()
        if not spec:
            raise HostfileError("%s %r: an empty NODE_SPEC (the format is NAME[:SLOT[,SLOT...]][@...])" % (flag, text))
        name, _, slots = spec.partition(":")
        if name not in hosts:
            raise HostfileError("%s %r: host %s is not in the hostfile (%s)" % (flag, text, name, ", ".join(hosts)))
        if not slots:
            out[name] = None
            continue
        chosen = out.get(name) or []
        for s in slots.split(","):
            if not s.strip().isdigit() or int(s) >= hosts[name]:
                raise HostfileError("%s %r: slot %r of %s: expected 0 .. %d" % (flag, text, s, name, hosts[name] - 1))
            if int(s) not in chosen:
                chosen.append(int(s))
        out[name] = sorted(chosen)
    return out


def select(hosts, include="", exclude="", num_nodes=-1, num_gpus=-1):
    """{host: [slot, ...]} of @hosts ({host: slots}) that the launch uses, as DeepSpeed's runner picks them:
    --include keeps only the named hosts (all their slots, or the slots named), --exclude drops the named hosts or
    slots (a host left without slots goes); the two are exclusive. Then the first @num_nodes hosts (when > 0) and
    each host's first @num_gpus slots (when > 0). HostfileError naming the flag for a host or slot not in
    @hosts, both filters given, or nothing left."""
    if include and exclude:
        raise HostfileError("--include and --exclude are mutually exclusive")
    res = collections.OrderedDict((h, list(range(n))) for h, n in hosts.items())
    if include:
        spec = _parse_spec(include, "--include", hosts)
        res = collections.OrderedDict((h, spec[h] if spec[h] is not None else list(range(hosts[h])))
                                      for h in hosts if h in spec)
    elif exclude:
        spec = _parse_spec(exclude, "--exclude", hosts)
        for h, s in spec.items():
            res[h] = [] if s is None else [x for x in res[h] if x not in s]
        res = collections.OrderedDict((h, s) for h, s in res.items() if s)
    if num_nodes > 0:
        if num_nodes > len(res):
            raise HostfileError("--num_nodes %d: only %d host(s) to run on (%s)" % (num_nodes, len(res),
                                                                                    ", ".join(res) or "none"))
        res = collections.OrderedDict(list(res.items())[:num_nodes])
    if num_gpus > 0:
        for h in res:
            if num_gpus > len(res[h]):
                raise HostfileError("--num_gpus %d: host %s has %d slot(s) to run on" % (num_gpus, h, len(res[h])))
            res[h] = res[h][:num_gpus]
    if not res:
        raise HostfileError("no host left to run on after --include/--exclude")
    return res
