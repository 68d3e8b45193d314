"""A man page and a bash completion script, both generated from the argument parser, so that
neither can disagree with `steer COMMAND --help`: every command, option, choice and default
comes from the same place the parser does."""
from __future__ import annotations

import argparse
import datetime
import textwrap

from steer import __version__

# options whose value is a path, or a network interface, or a namespace: completed from the
# file system, /sys/class/net, /run/netns
FILE_OPTIONS = {"--btf", "--policy", "--out", "--server-cmd"}
DEVICE_OPTIONS = {"--dev"}
NETNS_OPTIONS = {"--netns"}


def commands(parser: argparse.ArgumentParser) -> dict[str, tuple[str, argparse.ArgumentParser]]:
    """{command: (its one-line help, its parser)}, in the order of `steer --help`."""
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    helps = {a.dest: a.help or "" for a in sub._choices_actions}
    return {name: (helps.get(name, ""), p) for name, p in sub.choices.items()}


def _options(p: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in p._actions if a.option_strings]


def _positionals(p: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in p._actions if not a.option_strings]


def _help(p: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The help text as steer(1) prints it: its detail where it has one, %(default)s expanded,
    the default appended."""
    if not action.help:
        return ""
    formatter = p._get_formatter()
    formatter.detail = True   # steer(1) gives an option's whole help (cli.common.HelpFormatter)
    return " ".join(formatter._expand_help(action).split())


def _takes_value(action: argparse.Action) -> bool:
    return action.nargs != 0


def _metavar(action: argparse.Action) -> str:
    if action.metavar:
        return str(action.metavar)
    if action.choices:
        return "{" + ",".join(map(str, action.choices)) + "}"
    return action.dest.upper()


def synopsis(parser: argparse.ArgumentParser, name: str, width: int = 96) -> str:
    """COMMAND's synopsis as docs/commands.md shows it: its operands, then its options in the
    parser's order (the required ones without brackets, a choice as a|b), the tracer's options
    (cli.common.tracer_options) as one [TRACER OPTIONS], wrapped to WIDTH. NAME "tracer": those
    options themselves."""
    p = commands(parser)["flows" if name == "tracer" else name][1]
    tracer = {id(a) for g in p._action_groups if g.title == "tracer" for a in g._group_actions}
    words = ["TRACER OPTIONS:" if name == "tracer" else f"steer {name}"]
    words += [_metavar(a).replace(",", "|").strip("{}") for a in _positionals(p)]
    for a in _options(p):
        if a.option_strings == ["-h", "--help"] or (id(a) in tracer) != (name == "tracer"):
            continue
        word = next((o for o in a.option_strings if o.startswith("--")), a.option_strings[0])
        if _takes_value(a):
            word += " " + (_metavar(a).replace(",", "|").strip("{}") if a.choices else _metavar(a))
        words.append(word if a.required else f"[{word}]")
    if tracer and name != "tracer":
        words.append("[TRACER OPTIONS]")
    lines = [words[0]]
    for word in words[1:]:   # an option and its value never split over two lines
        if len(lines[-1]) + 1 + len(word) > width:
            lines.append("    " + word)
        else:
            lines[-1] += " " + word
    return "\n".join(lines)


def _roff(text: str) -> str:
    """TEXT safe in a roff line: backslashes escaped, options' dashes made real minus signs, and
    a line that would start with a control character protected."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\\&" + text if text[:1] in (".", "'") else text


def man_page(parser: argparse.ArgumentParser, date: str | None = None) -> str:
    """steer(1) in man(7) macros."""
    date = date or datetime.date.today().isoformat()
    out = [f'.TH STEER 1 "{date}" "steer {__version__}" "User Commands"',
           ".SH NAME", "steer \\- " + _roff(parser.description.split(":")[0].rstrip(".")),
           ".SH SYNOPSIS", ".B steer", ".I COMMAND", "[\\fIOPTIONS\\fR]",
           ".br", ".B steer", "\\-\\-version",
           ".SH DESCRIPTION", _roff(parser.description),
           "Every command also has \\fB\\-\\-help\\fR, which says the same as its section below.",
           ".SH COMMANDS"]
    for name, (short, p) in commands(parser).items():
        usage = " ".join(p.format_usage().split())
        usage = usage.removeprefix("usage: ")
        out += [f".SS {_roff(name)}", f".B {_roff(usage)}", ".PP", _roff(p.description or short)]
        for a in _positionals(p):
            out += [".TP", f".I {_roff(_metavar(a))}", _roff(_help(p, a))]
        for a in _options(p):
            if a.option_strings == ["-h", "--help"]:
                continue
            flag = ", ".join(f"\\fB{_roff(o)}\\fR" for o in a.option_strings)
            if _takes_value(a):
                flag += f" \\fI{_roff(_metavar(a))}\\fR"
            out += [".TP", flag, _roff(_help(p, a))]
    out += [".SH EXIT STATUS",
            ".TP", ".B 0", "success",
            ".TP", ".B 1",
            _roff("what the host lacks or refuses: no root, CAP_BPF or CAP_PERFMON, no BTF, "
                  "objects not built, an offline or non-existent CPU, an unknown device; the "
                  "error is one line on stderr"),
            ".TP", ".B 2",
            _roff("bad arguments: anything that does not parse, a FLOWSPEC, a CPU list, a "
                  "--listen address, options that do not go together"),
            ".TP", ".B 130, 143",
            _roff("interrupted before the command finished, by Ctrl-C (130) or SIGTERM (143), "
                  "after the same teardown; the commands that run until stopped (top, demo, "
                  "auto, export) stop cleanly on either and exit 0"),
            ".SH FILES",
            ".TP", ".I /sys/fs/bpf/steer",
            _roff("pinned steering programs, maps and links; removed by steer unpin and steer "
                  "reset"),
            ".TP", ".I /run/steer",
            _roff("IRQ and RPS settings as steer found them; put back by steer reset"),
            ".SH SEE ALSO", "\\fBtaskset\\fR(1), \\fBbpftool\\fR(8), \\fBip\\fR(8)",
            ".PP", _roff("README.md and docs/ of the steer sources: what each command measures, and how.")]
    return "\n".join(out) + "\n"


def bash_completion(parser: argparse.ArgumentParser) -> str:
    """A bash completion function for steer: commands, each command's options, and the values of
    options with choices, files, devices or namespaces."""
    cmds = commands(parser)
    cases = []
    for name, (_, p) in cmds.items():
        opts = [o for a in _options(p) for o in a.option_strings]
        values = []
        for a in _options(p):
            if not _takes_value(a):
                continue
            pattern = "|".join(a.option_strings)
            if a.choices:
                words = " ".join(map(str, a.choices))
                values.append(f'{pattern}) COMPREPLY=($(compgen -W "{words}" -- "$cur")); return;;')
            elif set(a.option_strings) & FILE_OPTIONS:
                values.append(f'{pattern}) COMPREPLY=($(compgen -f -- "$cur")); return;;')
            elif set(a.option_strings) & DEVICE_OPTIONS:
                values.append(f'{pattern}) _steer_names /sys/class/net; return;;')
            elif set(a.option_strings) & NETNS_OPTIONS:
                values.append(f'{pattern}) _steer_names /run/netns; return;;')
            else:
                values.append(f"{pattern}) return;;   # a value of its own kind")
        body = "\n".join(f"                {v}" for v in values)
        cases.append(f"""        {name})
            case "$prev" in
{body}
            esac
            COMPREPLY=($(compgen -W "{' '.join(opts)}" -- "$cur"));;""")
    script = f"""\
# bash completion for steer {__version__}, generated from its argument parser
# (steer completion bash); install as /usr/share/bash-completion/completions/steer

# the names in directory $1 that begin with $cur, each as it is: device and namespace names are
# anyone's to choose, and compgen -W would expand a name such as $(cmd), running cmd
_steer_names() {{
    local n
    COMPREPLY=()
    for n in "$1"/*; do
        n=${{n##*/}}
        [[ -e $1/$n && $n == "$cur"* ]] && COMPREPLY+=("$n")
    done
}}

_steer() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}" cmd="" i
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${{COMP_WORDS[i]}}" in -*) ;; *) cmd="${{COMP_WORDS[i]}}"; break;; esac
    done
    if [[ -z $cmd ]]; then
        COMPREPLY=($(compgen -W "{' '.join(cmds)} --help --version" -- "$cur"))
        return
    fi
    case "$cmd" in
{chr(10).join(cases)}
    esac
}}
complete -F _steer steer
"""
    return textwrap.dedent(script)
