"""The ``ironaccel`` command: devices, doctor, certify, merge, status, fake, clients, bench, expectations,
repro."""

from __future__ import annotations

import argparse
import functools
import os
import shlex
import shutil
import sys
from pathlib import Path

from . import tables

DESCRIPTION = """\
ironaccel: a GPU driver layer whose backends are proven by one shared conformance suite.

A *target* is a backend on one driver, e.g. webgpu/lavapipe (WebGPU on Mesa's CPU Vulkan driver) or
cuda/nvidia (CUDA on a real NVIDIA GPU). Typical use:

  ironaccel devices                 which backends this machine has, and why not the others
  ironaccel doctor                  which targets this machine can run, and how to fix the rest
  ironaccel certify --all           run the conformance suite on every runnable target -> results/
  ironaccel status                  regenerate STATUS.md from results/
"""


CERTIFY_DESCRIPTION = """\
Runs the conformance suite on each target in its own process (in parallel, bounded by cores; hardware targets
one at a time, as they share the GPU) and writes, per target, into a run folder of its own
(results/runs/<time>-<target>-<id>): <backend>-<driver>.json (results), .junit.xml (JUnit), .cert.json and
.cert.md (certificate), RUN.json; a run that finished with every test reported replaces the results folder's
files of its target (README: Runs are records). Each test has a time limit and a failing test is re-run up to
--retries times (default 1; a pass on re-run: flaky, with its passes/tries).

Selection (the same options on `pytest --target`): --only/--skip GLOB (repeatable) match test ids
(test_copy.py::*) or cited clause ids (KERNEL-*); --shard K/N runs every N-th selected test from the K-th
(by test id), for a farm; `ironaccel merge` joins the shards' results files into one.

A farm (--ray): each target, or each shard of about --shard-size tests, runs as a Ray task on a node that
advertises it; the files come back into --results (shards merged); --resume re-runs what is missing or crashed.

exit codes: 0 every target ran and nothing failed; 1 a target failed, crashed or timed out;
            2 nothing ran (no target given or runnable, unknown target, a target doctor says this machine
            cannot run (without --force), a selection matching no test, the results folder in use by
            another run (without --wait), bad --shard or --baseline,
            no Docker engine with --docker; with --ray: Ray not installed, no cluster, a target no
            node advertises);
            130 interrupted (Ctrl-C, SIGTERM): the test processes are stopped, nothing incomplete promoted;
            6 (with --baseline DIR) a regression: a test fails that did not in DIR's results file of its
            target, or a run that finished there did not finish now. Fixes and newly flaky tests are
            reported, not counted.
--verify:   the same as `ironaccel verify` (its exit codes: ironaccel verify --help).
"""

VERIFY_DESCRIPTION = """\
Checks a certificate (*.cert.json) against its results file, the suite's test list and this ironaccel's
suite, or a whole submission package (a folder). Exit codes:
  0 valid (a weakened run -- --only, --skip, --shard, --force, a non-default --test-timeout -- is "valid,
    weakened": it proves at most partial and supports no production claim)
  2 not a certificate or package (or a --trust file with no key)
  3 stale: made with another suite (an earlier or withdrawn release, an unknown one), ironaccel version or
    certificate schema, or the target's backend, driver or expectations changed since: re-certify
  4 tampered: the certificate, its results file or its signature is not what certify writes, or they
    disagree (a test missing or twice, an outcome no run gives, a key unknown, repeated or of the wrong type)
  5 untrusted: --trust given, and it is unsigned or signed by a key not among them
"""


def cmd_devices(args: argparse.Namespace) -> int:
    import ironaccel as ia
    from ..backends import get

    rows = [["backend", "available", "version", "details"]]
    for info in ia.backends():
        rows.append([info.name, "yes" if info.available else "no", info.version or "-", info.reason])
        if info.available and info.compute:
            backend = get(info.name)
            for i in range(backend.device_count()):
                with backend.open_device(i) as dev:
                    d = dev.info
                    kind = "simulated" if d.simulated else "hardware"
                    rows.append(["", f"  #{i}", kind, f"{d.name} — {d.vendor}, driver {d.driver} {d.driver_version}"])
    print(tables.plain(rows))
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from . import targets

    if args.ray_resources:
        import json

        from . import farm

        print(json.dumps(farm.node_resources()))
        return 0

    rows = [["target", "runnable", "what to do"]]
    for name, t in targets.TARGETS.items():
        why = t.missing()
        rows.append([name, "yes" if why is None else "no", "" if why is None else why])
    print(tables.plain(rows, width=shutil.get_terminal_size().columns))
    return 0


def cmd_certify(args: argparse.Namespace) -> int:
    from . import certify, judge, preflight, runs, targets
    from .selection import Selection

    if args.verify:
        print(f"(the new name: `ironaccel verify {args.verify}`)", file=sys.stderr)
        return cmd_verify(argparse.Namespace(path=args.verify, trust=[]))
    farm_only = [flag for flag, given in (("--shard-size", args.shard_size is not None), ("--resume", args.resume))
                 if given]
    if args.shard_size is not None and args.shard_size < 1:
        print(f"ironaccel certify: --shard-size {args.shard_size}: must be at least 1", file=sys.stderr)
        return 2
    if farm_only and not args.ray:
        print(f"ironaccel certify: {' and '.join(farm_only)} need{'s' if len(farm_only) == 1 else ''} --ray", file=sys.stderr)
        return 2
    if args.ray and (args.docker or (args.shard and args.shard_size)):
        print("ironaccel certify: --ray runs the farm's own processes: not with --docker, nor --shard with "
              "--shard-size", file=sys.stderr)
        return 2
    if args.all and args.ray:
        names = None  # every target the farm's nodes advertise
    elif args.all:
        names = certify.simulated_targets() if args.docker else certify.runnable_targets()
        if not names:
            print("no target is runnable on this machine: see `ironaccel doctor`", file=sys.stderr)
            return 2
    elif args.target:
        names = list(dict.fromkeys(args.target))
        if not args.ray:  # on a farm, a node may know a target this machine does not
            refusal = preflight.refusal(names, Path(args.results), args.force, args.docker)
            if refusal:
                print(f"ironaccel certify: {refusal}", file=sys.stderr)
                return 2
    elif args.package:
        print(f"(the new name: `ironaccel package {args.package} --results {args.results}`)", file=sys.stderr)
        return _package(args)
    else:
        print("name targets with --target T (repeatable) or use --all; `ironaccel doctor` lists them", file=sys.stderr)
        return 2
    try:
        selection = Selection(tuple(args.only), tuple(args.skip), args.shard)
        signer = _signing_key(args.sign)
    except ValueError as exc:
        print(f"ironaccel certify: {exc}", file=sys.stderr)
        return 2
    if args.baseline and not Path(args.baseline).is_dir():
        print(f"ironaccel certify: --baseline {args.baseline}: no such results folder", file=sys.stderr)
        return 2
    if args.baseline:
        from . import results

        try:  # a corrupt baseline is found before the run, not after it
            for name in names or []:
                if os.path.lexists(Path(args.baseline) / results.file_name(name)):
                    results.load(Path(args.baseline) / results.file_name(name))
        except ValueError as exc:
            print(f"ironaccel certify: --baseline: {exc}", file=sys.stderr)
            return 2
    if args.retries < 0:
        print(f"ironaccel certify: --retries {args.retries}: must be 0 or more", file=sys.stderr)
        return 2
    runner = functools.partial(certify.run_target, retries=args.retries)
    if args.docker:
        from . import containers

        try:
            runner = containers.container_runner(containers.docker_client(), names, args.retries)
        except containers.DockerUnavailable as exc:
            print(f"ironaccel certify --docker: {exc}", file=sys.stderr)
            return 2
    if args.ray:
        from . import farm

        try:
            runs = farm.certify_on_farm(names, Path(args.results), args.ray, timeout_s=args.timeout,
                                        test_timeout_s=args.test_timeout, selection=selection,
                                        shard_size=args.shard_size, resume=args.resume, runner=runner)
            if signer is not None:  # the farm writes into the results folder itself
                from . import results, signing

                for run in runs:
                    if run.results_file.is_file():
                        signing.sign(results.sibling(run.results_file, results.CERTIFICATE_SUFFIX), signer)
        except (farm.FarmUnavailable, runs.Busy) as exc:
            print(f"ironaccel certify --ray: {exc}", file=sys.stderr)
            return 2
    else:
        forced = {n: why for n in names if args.force and (why := targets.get(n).missing())}
        try:
            with runs.interrupts():
                runs = certify.certify(names, Path(args.results), jobs=args.jobs, timeout_s=args.timeout,
                                       test_timeout_s=args.test_timeout, runner=runner, selection=selection,
                                       forced=forced, wait=args.wait, signer=signer)
        except runs.Busy as exc:
            print(f"ironaccel certify: {exc}", file=sys.stderr)
            return 2
        except runs.Interrupted as exc:
            print(f"\nironaccel certify: {exc}", file=sys.stderr)
            return runs.EXIT_INTERRUPTED
        except KeyboardInterrupt:  # while no target ran (waiting for the lock, say): no run to record
            print("\nironaccel certify: interrupted while no target was running", file=sys.stderr)
            return runs.EXIT_INTERRUPTED
    print()
    print(certify.summary_table(runs))
    empty = [r for r in runs if r.status == "empty"]
    if empty:
        print("\n".join(f"ironaccel certify: {r.target}: {r.kept}; nothing was written" for r in empty), file=sys.stderr)
        return 2
    code = 0 if all(r.ok for r in runs) else 1
    if args.baseline:
        print(f"\nagainst the baseline {args.baseline}:")
        for run, comparison in zip(runs, certify.compare_with_baseline(runs, Path(args.baseline))):
            if comparison is None:
                print(f"{run.target}: no baseline results file, nothing to compare")
                continue
            print("\n".join(comparison.report() or [f"{run.target}: no change"]))
            if comparison.regressed:
                code = judge.EXIT_REGRESSION
        if code == judge.EXIT_REGRESSION:
            print(f"REGRESSION (exit {judge.EXIT_REGRESSION})", file=sys.stderr)
    if args.status:
        from . import status

        status.command(Path(args.results), Path(args.status))
    if args.package:
        return _package(args) or code
    return code


def cmd_verify(args: argparse.Namespace) -> int:
    """``ironaccel verify CERT|PACKAGE [--trust KEYS]`` (``certify --verify``, its old name)."""
    from . import signing, submission, verifier

    try:
        trusted = [key for keys in args.trust for key in signing.load_trusted_keys(Path(keys))] if args.trust else None
        check = submission.verify if Path(args.path).is_dir() else verifier.verify
        code, why = check(Path(args.path), trusted)
    except (ValueError, RuntimeError) as exc:  # RuntimeError: the suite's tests could not be collected
        print(f"ironaccel verify: {exc}", file=sys.stderr)
        return 2
    print(why, file=sys.stdout if code == verifier.VERIFY_VALID else sys.stderr)
    return code


def _signing_key(path: str | None):
    """The private key of ``--sign`` (None without it); ValueError naming the file when it is not one."""
    from . import signing

    return None if path is None else signing.load_private_key(Path(path))


def _package(args: argparse.Namespace) -> int:
    """``ironaccel package OUT [--results DIR]`` (``certify --package``, which can also follow a run)."""
    from . import submission

    try:
        out = submission.package(Path(args.results), Path(args.package), signer=_signing_key(args.sign))
    except (ValueError, OSError) as exc:
        print(f"ironaccel certify --package: {exc}", file=sys.stderr)
        return 2
    print(f"wrote the submission package {out}; check it with `ironaccel verify {out}`")
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    from . import certify

    try:
        doc = certify.merge([Path(f) for f in args.files], Path(args.output))
    except ValueError as exc:
        print(f"ironaccel merge: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.output}: {doc['target']['name']}, {len(doc['tests'])} tests from {len(args.files)} shards, "
          f"run {doc['run']['status']}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from . import status

    return status.command(Path(args.results), Path(args.output), check=args.check, installed=args.installed)


def cmd_fakes_build(args: argparse.Namespace) -> int:
    from .. import fakes

    print(fakes.build())
    return 0


def cmd_fake_run(args: argparse.Namespace) -> int:
    from .. import fakes

    command = args.command_line[1:] if args.command_line[:1] == ["--"] else args.command_line
    if not command:
        print("ironaccel fake run: no command given (ironaccel fake run -- CMD ...)", file=sys.stderr)
        return 2
    try:
        fakes.exec_with_fake(command)  # the command's exit status and signals are the caller's
        os.execvp(command[0], command)  # already in the fake's environment (a nested fake run)
    except OSError as exc:
        print(f"ironaccel fake run: cannot run {command[0]!r}: {exc}", file=sys.stderr)
        return 127


def cmd_fake_env(args: argparse.Namespace) -> int:
    from .. import fakes

    env = fakes.child_env()
    fakes.check(env)
    for name in sorted(k for k, v in env.items() if os.environ.get(k) != v):
        print(f"{name}={env[name]}" if args.github else f"export {name}={shlex.quote(env[name])}")
    return 0


def parser() -> argparse.ArgumentParser:
    from .certify import RETRIES, TARGET_TIMEOUT_S, TEST_TIMEOUT_S

    p = argparse.ArgumentParser(prog="ironaccel", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sub.add_parser("devices", help="every registered backend, available or not, and its devices").set_defaults(func=cmd_devices)
    d = sub.add_parser("doctor", help="which targets this machine can run; how to fix the others")
    d.add_argument("--ray-resources", action="store_true", help="print the targets this machine can run as Ray "
                   "custom resources (JSON), for a farm node: ray start --resources \"$(ironaccel doctor --ray-resources)\"")
    d.set_defaults(func=cmd_doctor)

    c = sub.add_parser("certify", help="run the conformance suite on targets; write results, JUnit, certificates",
                       description=CERTIFY_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    which = c.add_mutually_exclusive_group()
    which.add_argument("--target", action="append", metavar="BACKEND/DRIVER", help="a target to run (repeatable)")
    which.add_argument("--all", action="store_true",
                       help="every target this machine can run (with --docker: every simulated target)")
    which.add_argument("--verify", metavar="CERT|PACKAGE", help="check a certificate (*.cert.json) against its "
                       "results file and the current suite, or a whole submission package (a folder)")
    c.add_argument("--results", default="results", metavar="DIR", help="where results files go (default: results)")
    c.add_argument("--jobs", type=int, default=None, help="parallel target processes (default: CPU count)")
    c.add_argument("--timeout", type=float, default=TARGET_TIMEOUT_S, metavar="S",
                   help=f"per-target time limit in seconds (default: {TARGET_TIMEOUT_S:g})")
    c.add_argument("--test-timeout", type=float, default=TEST_TIMEOUT_S, metavar="S",
                   help=f"per-test time limit in seconds (default: {TEST_TIMEOUT_S:g})")
    c.add_argument("--retries", type=int, default=RETRIES, metavar="N", help="re-run a failing test up to N more "
                   f"times, until it passes (default: {RETRIES}); a pass on re-run is flaky, its passes/tries recorded")
    c.add_argument("--docker", action="store_true", help="run each target in its own container (ci/docker images; "
                   "simulated targets in the GPU-less one, hardware targets in the CUDA one with the host's GPUs)")
    c.add_argument("--package", metavar="OUT", help="bundle the results folder (after the run, with --target or "
                   "--all) into a new folder OUT: results, JUnit, certificates, environment, git commit, dirty "
                   "flag and diff; check it with --verify OUT")
    c.add_argument("--only", action="append", default=[], metavar="GLOB",
                   help="run only tests whose id or a cited clause id matches (repeatable): KERNEL-*, test_copy.py::*")
    c.add_argument("--skip", action="append", default=[], metavar="GLOB",
                   help="do not run tests whose id or a cited clause id matches (repeatable)")
    c.add_argument("--shard", default="", metavar="K/N", help="run shard K of N of the selected tests")
    c.add_argument("--ray", metavar="ADDRESS|auto|local", help="run each target as a task on a Ray cluster, on a "
                   "node that advertises it (ironaccel doctor --ray-resources): ADDRESS (host:port, ray://host:port), "
                   "auto (the cluster `ray start` began here) or local (a new one on this machine); with --all, every "
                   "target a node advertises; --jobs does not apply (the nodes' CPUs bound it). Needs "
                   "pip install 'ironaccel[farm]'")
    c.add_argument("--shard-size", type=int, default=None, metavar="N", help="with --ray: split each target into "
                   "shards of about N tests, each its own task; they merge into the target's results file")
    c.add_argument("--resume", action="store_true", help="with --ray: run only the targets (and shards) whose "
                   "results file in --results is missing or crashed")
    c.add_argument("--status", metavar="FILE", help="after the run, regenerate FILE (a STATUS.md) from the results "
                   "folder, as `ironaccel status --results DIR --output FILE`")
    c.add_argument("--force", action="store_true", help="run targets `ironaccel doctor` says this machine cannot "
                   "run (each results file records it); never promoted over a committed hardware result")
    c.add_argument("--wait", action="store_true", help="when another run holds the results folder, wait for it "
                   "instead of refusing")
    c.add_argument("--sign", metavar="KEYFILE", help="sign each certificate and its results file with this "
                   "ed25519 private key (PEM; never commit it): <backend>-<driver>.cert.sig beside the certificate; "
                   "with --package, the package's certificates too")
    c.add_argument("--baseline", metavar="DIR", help="compare each target's run with its results file in DIR: "
                   "new failures, fixes, newly flaky tests (exit 6 on a regression)")
    c.set_defaults(func=cmd_certify)

    v = sub.add_parser("verify", help="check a certificate (*.cert.json) against its results file and the "
                       "current suite, or a whole submission package (a folder)",
                       description=VERIFY_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    v.add_argument("path", metavar="CERT|PACKAGE")
    v.add_argument("--trust", action="append", default=[], metavar="KEYS", help="a file of ed25519 public keys "
                   "(PEM; repeatable): valid only when signed by one of them, else exit 5")
    v.set_defaults(func=cmd_verify)
    pk = sub.add_parser("package", help="bundle a results folder into a new submission package folder OUT")
    pk.add_argument("package", metavar="OUT", help="the package folder to make (must not exist)")
    pk.add_argument("--results", default="results", metavar="DIR", help="results folder (default: results)")
    pk.add_argument("--sign", metavar="KEYFILE", help="sign each certificate in the package with this ed25519 "
                    "private key (PEM); the manifest records its public key")
    pk.set_defaults(func=_package)

    m = sub.add_parser("merge", help="merge the shard results files of one target run into one results file")
    m.add_argument("files", nargs="+", metavar="SHARD.json", help="results files of --shard 1/N .. N/N")
    m.add_argument("--output", required=True, metavar="FILE",
                   help="the merged results file (its JUnit and certificate are written beside it)")
    m.set_defaults(func=cmd_merge)

    s = sub.add_parser("status", help="regenerate STATUS.md from results files")
    s.add_argument("--results", default="results", metavar="DIR", help="results directory (default: results)")
    s.add_argument("--output", default="STATUS.md", metavar="FILE", help="file to write (default: STATUS.md)")
    s.add_argument("--check", action="store_true", help="exit 1 if FILE is not what the results generate")
    s.add_argument("--installed", action="store_true", help="also list the backends and targets installed here "
                   "that have no results (STATUS.md itself shows only what the results and the built-ins give)")
    s.set_defaults(func=cmd_status)

    f = sub.add_parser("fake", aliases=["fakes"], help="the fake libcuda (a CUDA driver that computes on the CPU)")
    fsub = f.add_subparsers(dest="fakes_command", required=True, metavar="ACTION")
    fsub.add_parser("build", help="build (or find cached) and print the fake's path").set_defaults(func=cmd_fakes_build)
    r = fsub.add_parser("run", help="run a command with the fake as its CUDA driver (and the simulated toolchain); "
                        "refused, naming what would load, if the command would not get the fake")
    r.add_argument("command_line", nargs=argparse.REMAINDER, metavar="-- CMD ...")
    r.set_defaults(func=cmd_fake_run)
    e = fsub.add_parser("env", help="print the variables that make the fake the driver: "
                        "eval \"$(ironaccel fake env)\", or ironaccel fake env --github >> \"$GITHUB_ENV\"")
    e.add_argument("--github", action="store_true", help="NAME=value lines (a GitHub Actions $GITHUB_ENV file)")
    e.set_defaults(func=cmd_fake_env)

    from . import clients  # its options live with the client runner

    clients.add_arguments(sub.add_parser("clients", help="run other projects' CUDA test suites on the fake or "
                                         "hardware; regenerate CLIENTS.md from their results"))

    from . import bench  # its options and ``func=bench.command`` live with the benchmark

    bench.add_arguments(sub.add_parser("bench", help=bench.HELP))

    from . import repro  # its options and ``func`` live with the repro writer

    repro.add_arguments(sub.add_parser("repro", help="write a standalone script (no ironaccel) that reproduces "
                                       "a conformance test's wrong kernel values on a target"))

    from . import expectations  # its options and ``func`` live with the expectations files

    expectations.add_arguments(sub.add_parser("expectations", help="expectations files: `update --from RUN` adds "
                                              "a run's new failures and flakes, removes entries whose tests pass"))

    from . import report  # its options and ``func=report.command`` live with the site builder

    report.add_arguments(sub.add_parser("report", help="a static results site (matrix, targets, clauses, tests, "
                                        "diffs between runs, bench, clients) from results folders"))
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from ..errors import IronAccelError

    try:
        return args.func(args)
    except IronAccelError as exc:
        print(f"ironaccel: {exc}", file=sys.stderr)
        return 2
