"""What ``cascade-proxy``'s usage errors add and take out: the hint of where an option given
before the command's name goes, and the mask over each secret the command line gave, which
argparse would quote. ``proxy.cli`` imports this module before its Ctrl-C guard runs, so it
stays on the standard library as that module does; the masking patterns load on an error's
path alone.
"""

from __future__ import annotations

import argparse
import difflib
import re
import shlex
import sys
from collections.abc import Collection, Sequence
from typing import Any

from proxy.cli_args import QUOTED_DIGITS

__all__ = [
    "command_parser",
    "misplaced",
    "names",
    "options",
    "shown_tokens",
    "unmarked",
    "unnamed_choice",
    "unquoted_secrets",
    "valued_before",
]


def misplaced(
    command: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    args: Any,
    names: Collection[str] = (),
    unplaced: Collection[str] = (),
    known: Collection[str] = (),
) -> str:
    """The hint for a command's option given before the command's name (``cascade-proxy
    --json sessions ls``), which the top parser does not take: the error is the command's,
    whose usage lists the option, so it says where the option goes: after the action's
    name (``sessions ls --limit=1``), which takes each of its options, where ``sessions``
    takes its client options alone; else nothing, as for an argument no option takes
    (``unplaced``), which the corrected command would be refused for in turn."""
    given = list(sys.argv[1:] if argv is None else argv)
    at = given.index(args.command) if args.command in given else 0
    if at == 0 or unplaced or not _all_known(given[:at], command._option_string_actions):
        return ""
    action = getattr(args, "action", None)
    end = given.index(action, at + 1) if action in given[at + 1 :] else at
    shown = shown_tokens(given, names, unplaced, known)
    moved = [*shown[at : end + 1], *shown[:at], *shown[end + 1 :]]
    named = args.command if end == at else f"{args.command} {action}"
    return f" (an option of {named} goes after the command's name: cascade-proxy {_join(moved)})"


def _all_known(tokens: Sequence[str], known: dict[str, argparse.Action]) -> bool:
    """Whether each option of ``tokens`` is one of ``known``; the token after one that takes
    a value (``--api-key -K``: a key may start with ``-``) is that value, no option."""
    value_next = False
    for token in tokens:
        name, eq, _ = token.partition("=")
        if value_next or not token.startswith("-"):
            value_next = False
            continue
        if name not in known:
            return False
        value_next = not eq and known[name].nargs != 0
    return True


def valued_before(top: argparse.ArgumentParser, given: Sequence[str]) -> str:
    """The hint for a command's option with a value given before the command's name
    (``cascade-proxy --url U sessions ls``): the top parser takes no such option and reads
    its value as the command's name, an invalid choice. The options go after the rest,
    where the action takes them; none for a rest that ends its options with ``--``, nor for
    an option that command or action does not take, which would be refused in turn."""
    commands = _subcommands(top)[0].choices
    at = next((i for i, token in enumerate(given) if token in commands), 0)
    if at == 0 or not given[0].startswith("-") or "--" in given[at:]:
        return ""
    known = _named_parser(top, given[at:])._option_string_actions
    if any(t.split("=")[0] not in known for t in given[:at] if t.startswith("-")):
        return ""
    shown = shown_tokens(given, commands, (), options(top))
    moved = _join([*shown[at:], *shown[:at]])
    return f" (an option of {given[at]} goes after the command's name: cascade-proxy {moved})"


def _named_parser(parser: argparse.ArgumentParser, given: Sequence[str]) -> Any:
    """The parser of the command and action ``given`` names (``sessions --json ls``)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            at = next((i for i, token in enumerate(given) if token in action.choices), -1)
            if at >= 0:
                return _named_parser(action.choices[given[at]], given[at + 1 :])
    return parser


def command_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Any:
    """The parser of the command ``args`` names (``sessions ls``), down its subcommands."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(str(getattr(args, action.dest, "")))
            return parser if chosen is None else command_parser(chosen, args)
    return parser


# An option whose name says it holds a credential (as a query parameter's does, proxy.
# credentials.CREDENTIAL_WORDS), given or mistyped: its value is never quoted. The word ends
# the name (--db-password, --oauth, --credentials), so a value that is none (--tokenizer,
# --passes, --keyfile: the mistake is the option) stays readable, and so does a count's
# (--max-tokens 500, --num-keys 120): a word of _COUNTS in the name and a number given; any
# other value of such an option (--token-limit K) is masked, as the word may be the key's.
# A password's short names (--pw, --pwd) and a login's (curl's --user user:password) too.
_SECRET_OPTION = re.compile(
    r"--[\w-]*(?:key|token|secret|pass|cred|auth|pwd?|user|login)"
    r"(?:word|wd|phrase|entials?|orization)?s?$",
    re.IGNORECASE,
)
_COUNTS = frozenset({"max", "min", "num", "count", "limit", "total", "n"})

_SCHEMES = ("bearer", "basic", "token")
"""An Authorization header's schemes, which a key copied from the header starts with."""

MASK = "***"


def _secret_option(name: str, value: str) -> bool:
    words = set(re.split(r"[-_]+", name.lstrip("-").lower()))
    count = bool(words & _COUNTS) and re.fullmatch(_NUMBER, value) is not None
    return bool(_SECRET_OPTION.match(name)) and not count


_NUMBER = rf"-?\d{{1,{QUOTED_DIGITS}}}"
"""A number an error quotes (a count's, a mistyped ``--limit``'s): a longer run of digits may
be a key, which may be all digits."""


def _secrets(
    given: Sequence[str], names: Collection[str], known: Collection[str] = ()
) -> dict[int, list[str]]:
    """Each token of ``given`` holding a secret, by its place, with the secrets it holds:
    the value given to an option that may take one, whatever its shape (digits, a short word,
    one character): ``--api-key``, its prefixes argparse takes, ``--a`` too, ``--api-kye``, an
    option named by a credential's word (:func:`_secret_option`), and any short option: none
    but ``-h`` is cascade-proxy's, and another command's habit may hold a credential (curl's
    ``-u user:password``). The value is in the option's token (``--api-key=K``) or the next
    one, which is no long option (a key may start with ``-``) and no command's name
    (``--api-key sessions ls``, the key in the environment); and the token after an
    authorization scheme given as the value (``--api-key Bearer K``). A word after one dash
    (``-upassword``) is a short option with its value, its value masked, and so is the next
    token, as the option's may be; unless it is one of ``known`` (cascade-proxy's options,
    :func:`options`), or close to one, given with one dash (``-json``, ``-limit 5``,
    ``-api-key K``). A dash pasted from a document or a chat (an em dash, a Unicode hyphen
    or minus: ``\u2014api-key K``) is read as an ASCII one (:func:`_dashed`)."""
    found: dict[int, list[str]] = {}
    longs = [o for o in known if o.startswith("--")]
    given = [_dashed(token) for token in given]
    for i, token in enumerate(given):
        name, eq, value = token.partition("=")
        if re.match(r"-[^\W\d_]", name) and len(name) > 2:  # one dash, more than a letter
            if f"-{name}" in longs or difflib.get_close_matches(f"-{name}", longs, 1, 0.8):
                name = f"-{name}"  # -json, -api-key K: a long option's name with one dash
            else:  # -upassword: curl's -u and its value, in one token
                found.setdefault(i, []).append(token[2:])
                name, eq, value = token[:2], "", ""
                if i + 1 >= len(given) or given[i + 1] in names or given[i + 1][:1] == "-":
                    continue
        at = i  # the token holding the value
        if not eq and i + 1 < len(given) and not given[i + 1].startswith("--"):
            at, value = i + 1, "" if given[i + 1] in names else given[i + 1]
        short = len(name) == 2 and name[0] == "-" and name[1].isalpha() and name != "-h"
        if not (short or _secret_option(name, value) or _near("--api-key", name)):
            continue
        scheme, blank, rest = value.partition(" ")
        if blank and scheme.lower() in _SCHEMES and rest.strip():  # "Bearer K" as one token
            value = rest
        if value:
            found.setdefault(at, []).append(value)
        if value.lower() in _SCHEMES and at + 1 < len(given) and given[at + 1]:
            found.setdefault(at + 1, []).append(given[at + 1])  # "Bearer K": K, an extra
    return found


_LOOKALIKE = "\u2010-\u2015\u2212\ufe58\ufe63\uff0d"
_DASHES = re.compile(rf"^[-{_LOOKALIKE}]*[{_LOOKALIKE}]-*")
"""A token's leading dashes, one of them at least no ASCII one (``\u2014``, ``\u2010\u2010``)."""


def _dashed(token: str) -> str:
    """``token`` with its leading dashes as ASCII ones where any is a lookalike of ``-``: one
    as ``-`` (an editor's em dash for ``--`` is then a long option's name with one dash,
    ``-api-key``, or a short option, ``\u2013u``), two or more as ``--``. argparse takes it
    for no option, and the word after it, the option's value, was quoted as an argument."""
    return _DASHES.sub(lambda dashes: "-" * min(len(dashes[0]), 2), token, count=1)


def unmarked(
    extra: Sequence[str], names: Collection[str], known: Collection[str] = ()
) -> tuple[str, ...]:
    """The arguments of ``extra`` (those no parser took) that nothing marks as what they
    are: not an option, nor the value after an option the command does not know (``--bogus
    value``: the option's name says what it holds; after a ``known`` one, ``--json K``, it
    is none), nor a number, a short lower-case word (:func:`_word`) or a command's name;
    after ``--`` none is an option or its
    value. One may be a key given without its option (``sessions ls K``, ``ls -- K``), which
    no shape gives away: it is never quoted."""
    end = extra.index("--") if "--" in extra else len(extra)
    found = []
    for i, token in enumerate(extra):
        before = _dashed(extra[i - 1]) if 0 < i < end else ""
        after_option = before.startswith("-") and "=" not in before and before not in known
        plain = token in names or re.fullmatch(_NUMBER, token) or _word(token) or i == end
        option = _dashed(token).startswith("-") and i < end
        if not option and not after_option and not plain and len(token) >= 3:
            found.append(token)
    return tuple(found)


_WORD_MOST = 16
"""The longest lower-case word quoted as a mistyped name (``suggestions`` is 11)."""


def _word(token: str) -> bool:
    """Whether ``token`` is a short word in lower case (``list``, ``all``, a fact's word left
    unquoted): a mistyped name or text, quoted; a passphrase's words are longer together."""
    return len(token) <= _WORD_MOST and re.fullmatch(r"[a-z]+(?:-[a-z]+)*", token) is not None


def unnamed_choice(
    message: str, given: Sequence[str], names: Collection[str], flags: dict[str, bool]
) -> tuple[str, ...]:
    """The argument argparse's ``invalid choice`` quotes (``cascade-proxy K sessions ls``: a
    key given without its option, read as the command's name) when it is neither a short word
    in lower case nor close to a command's name: a mistyped command (``sesions``, ``run``)
    stays readable, and what looks like no command at all, which may be a key (a passphrase
    of lower-case words is longer than any command's name), is not quoted; an
    option's value (``--keyfile k.pem``) is marked by the option's name, but a flag of
    ``flags`` (:func:`options`: ``--json K sessions ls``) takes none."""
    if "invalid choice: " not in message:
        return ()
    for i, token in enumerate(given):
        valued = i > 0 and _takes_value(given[i - 1], flags)
        if token.startswith("-") or token in names or repr(token) not in message or valued:
            continue
        if _word(token) or difflib.get_close_matches(token, names):
            return ()
        return (token,)
    return ()


def unquoted_secrets(
    message: str,
    given: Sequence[str],
    names: Collection[str],
    unplaced: Sequence[str] = (),
    known: Collection[str] = (),
) -> str:
    """``message`` with each secret the command line gave (:func:`_secrets`) and each
    argument ``unplaced`` (:func:`unmarked`) as ``***``, and each URL's user and password
    cut out (``--url``, ``--database-url``): argparse quotes a token it cannot place, and
    one given before the command's name (``cascade-proxy --api-key K sessions ls``) is
    read as that name, so the line, kept in a CI log, would carry the key. Then what every
    log line masks (``proxy.logs.masked``: a key by its shape, a ``Bearer`` token, a
    credential query parameter), for a key given where no option names it, which argparse
    writes before, and without, any log line's masking. argparse's words after ``argument
    --api-key:`` are no value."""
    from proxy.logs import masked, without_credentials  # an error's path alone: loads light

    held = _secrets(given, names, known)
    shown = {
        f: MASK for v in [*(v for vs in held.values() for v in vs), *unplaced] for f in _quoted(v)
    }
    for i, values in held.items():  # -upassword: the option's letter kept, "-u***"
        dashed = _dashed(given[i])  # "\u2013uK" too
        if dashed[2:] in values and dashed[:1] == "-" != dashed[1:2]:
            shown.update({f: f[:2] + MASK for f in _quoted(given[i])})
    for form in sorted(shown, key=len)[::-1]:
        # whole: "--api-key key" hid the option's name, "-o json" the flag --json
        message = re.sub(rf"(?<![\w-]){re.escape(form)}(?![\w-])", shown[form], message)
    head, said = message.split(": ", 1) if message.startswith("argument ") else ("", message)
    if unplaced:
        said += f" ({MASK} is an argument no option takes, not quoted: it may be a key)"
    return (f"{head}: " if head else "") + masked(without_credentials(said))


def shown_tokens(
    given: Sequence[str],
    names: Collection[str],
    unplaced: Collection[str] = (),
    known: Collection[str] = (),
) -> list[str]:
    """``given`` as a hint quotes it: each secret masked in its token, the rest of the token
    kept (``--api-key=***``, ``'Bearer ***'``), each argument ``unplaced`` as ``***``, and a
    URL's password (or a user alone, which may be a token) as ``***``, its user and host
    kept, so the corrected command shows its shape and no secret."""
    secrets = _secrets(given, names, known)
    shown = []
    for i, token in enumerate(given):
        if token in unplaced:
            token = MASK
        for value in sorted(secrets.get(i, []), key=len)[::-1]:
            token = token.replace(value, MASK)
        shown.append(_URL_USER.sub(_url_masked, token))
    return shown


_URL_USER = re.compile(r"(://)([^/?#@:]*)(:[^/?#@]*)?@")


def _url_masked(m: re.Match[str]) -> str:
    return f"{m[1]}{m[2]}:{MASK}@" if m[3] else f"{m[1]}{MASK}@"


def _join(tokens: Sequence[str]) -> str:
    """``tokens`` as a shell command line, a masked token (``***``, ``--api-key=***``) left
    unquoted so it reads as the placeholder it is, not a glob quoted away."""
    return " ".join(
        t if re.fullmatch(rf"(?:--[\w-]+=)?{re.escape(MASK)}", t) else shlex.quote(t)
        for t in tokens
    )


def _tree(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """``parser`` and each parser down its subcommands."""
    return [
        parser,
        *(p for a in _subcommands(parser) for c in a.choices.values() for p in _tree(c)),
    ]


def _subcommands(parser: argparse.ArgumentParser) -> list[argparse._SubParsersAction[Any]]:
    return [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]


def names(parser: argparse.ArgumentParser) -> frozenset[str]:
    """The name of each command and action ``parser`` takes, down its subcommands."""
    return frozenset(name for p in _tree(parser) for a in _subcommands(p) for name in a.choices)


def options(parser: argparse.ArgumentParser) -> dict[str, bool]:
    """Each option ``parser`` takes, down its subcommands, and whether it takes a value."""
    return {o: a.nargs != 0 for p in _tree(parser) for a in p._actions for o in a.option_strings}


def _takes_value(token: str, options: dict[str, bool]) -> bool:
    """Whether the option ``token`` reads the next token as its value: one no command has
    may (``--keyfile k.pem``), a flag does not (``--json``, or a prefix argparse would take
    for flags alone, ``--js``)."""
    if not token.startswith("-") or "=" in token:
        return False
    taken = [v for o, v in options.items() if o.startswith(token)] if len(token) > 2 else []
    return options.get(token, any(taken) or not taken)


def _quoted(value: str) -> set[str]:
    """``value`` as given and as a message quotes it: argparse by ``repr`` (a backslash
    doubled, an invisible character escaped), the hint by ``shlex`` (``'`` as ``'"'"'``)."""
    return {value, repr(value)[1:-1], value.replace("'", "'\"'\"'")}


def _near(option: str, name: str) -> bool:
    """Whether ``name`` is ``option`` by a prefix (``--a``: argparse takes it where no other
    option starts so, and quotes it whole, value too, as ambiguous where one does) or a
    typo."""
    near = difflib.SequenceMatcher(None, option, name).ratio() >= 0.8
    return name.startswith("--") and (len(name) > 2 and option.startswith(name) or near)
