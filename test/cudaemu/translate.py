#!/usr/bin/env python3
"""Rewrites a CUDA source so that g++ compiles it against the emulation.

Usage: translate.py INPUT.cu OUTPUT.cpp

Four constructs are not C++ or need the emulation's help and get
rewritten; everything else is left to Kernel.h, which the build includes
first:

  * kernel<<<grid, block[, shared[, stream]]>>>(args) becomes
        ::mtc::cudaemu::Launch(ADDRESS, "kernel", grid, block[, shared[,
            stream]])
            .run([=](auto... p) { kernel(p...); }, args)
    where ADDRESS is the kernel's address when the name alone resolves to
    one function (Kernel.h's addressOrNull), else null;
  * extern __shared__ [__align__(n)] T name[]; becomes
        T *name = reinterpret_cast<T *>(::mtc::cudaemu::dynamicShared());
  * __shared__ T a[n], b; becomes
        static T a[n], b; ::mtc::cudaemu::freshShared(&a, sizeof(a));
        ::mtc::cudaemu::freshShared(&b, sizeof(b));
    so that the first thread of each block to declare them fills them with
    0xff bytes: a block never sees what an earlier block left there;
  * __global__ void __launch_bounds__(max[, min]) kernel(params) { body }
    becomes
        __global__ void kernel(params) { if (!::mtc::cudaemu::
            withinLaunchBounds(max, "kernel")) return; body }
    so that a launch of more threads a block than the bounds allow fails,
    as on a GPU (a declaration without a body just loses its bounds).

Line numbers are kept (the rewritten text has the same newlines), and a
#line directive names the original file, so compiler messages point at the
CUDA source.
"""

import re
import sys

EXTERN_SHARED = re.compile(
    r"extern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s+)?"
    r"((?:[A-Za-z_][\w:]*\s+)*?[A-Za-z_][\w:]*)\s+(\w+)\s*\[\s*\]\s*;")


def fail(path, text, pos, message):
    line = text.count("\n", 0, pos) + 1
    sys.exit(f"{path}:{line}: translate.py: {message}")


def skip_string(text, i):
    """Index after the string or character literal starting at text[i]."""
    quote = text[i]
    i += 1
    while i < len(text) and text[i] != quote:
        i += 2 if text[i] == "\\" else 1
    return i + 1


def matching(text, i, open_char, close_char):
    """Index of the bracket closing the one at text[i]."""
    depth = 0
    while i < len(text):
        c = text[i]
        if c in "\"'":
            i = skip_string(text, i)
            continue
        if c == open_char:
            depth += 1
        elif c == close_char:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def kernel_start(text, end):
    """Start of the kernel expression that ends just before text[end]
    (an optionally qualified name with optional template arguments)."""
    i = end
    while i > 0 and text[i - 1].isspace():
        i -= 1
    if text[i - 1] == ">":  # template arguments: back to their '<'
        depth = 0
        while i > 0:
            i -= 1
            if text[i] == ">":
                depth += 1
            elif text[i] == "<":
                depth -= 1
                if depth == 0:
                    break
    while i > 0 and (text[i - 1].isalnum() or text[i - 1] in "_:"):
        i -= 1
    return i


def split_top_level(text):
    """Splits at commas outside brackets."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        c = text[i]
        if c in "\"'":
            i = skip_string(text, i)
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return parts


def in_comment(text, i):
    line_start = text.rfind("\n", 0, i) + 1
    if "//" in text[line_start:i]:
        return True
    return text.rfind("/*", 0, i) > text.rfind("*/", 0, i)


def rewrite(text, token, replace):
    """Rewrites each occurrence of `token` outside comments (and not part of
    a longer name): replace(at) returns (start, end, new text) for
    text[start:end], where start <= at and end > at."""
    out, pos = [], 0
    while True:
        at = text.find(token, pos)
        if at < 0:
            out.append(text[pos:])
            return "".join(out)
        after = at + len(token)
        if in_comment(text, at) or (token[-1].isalnum() and after < len(text)
                                    and (text[after].isalnum() or
                                         text[after] == "_")):
            out.append(text[pos:after])
            pos = after
            continue
        start, end, new = replace(at)
        out.append(text[pos:start])
        out.append(new)
        pos = end


def rewrite_launches(path, text):
    def launch(at):
        start = kernel_start(text, at)
        kernel = text[start:at].strip()
        if not kernel:
            fail(path, text, at, "a launch without a kernel name")
        close = text.find(">>>", at)
        if close < 0:
            fail(path, text, at, "'<<<' without '>>>'")
        config = text[at + 3:close]
        if len(split_top_level(config)) not in (2, 3, 4):
            fail(path, text, at, "a launch needs 2 to 4 configuration values")
        paren = close + 3
        while paren < len(text) and text[paren].isspace():
            paren += 1
        if paren >= len(text) or text[paren] != "(":
            fail(path, text, close, "a launch without its argument list")
        end = matching(text, paren, "(", ")")
        if end < 0:
            fail(path, text, paren, "unbalanced argument list")
        args = text[paren + 1:end]
        name = " ".join(kernel.split())
        between = text[close + 3:paren]  # keeps the newlines
        address = ("::mtc::cudaemu::addressOrNull([&](auto mtcEmuD) -> decltype("
                   "::mtc::cudaemu::kernelAddress(::mtc::cudaemu::dependent<"
                   f"decltype(mtcEmuD)>({name}))) {{ return "
                   "::mtc::cudaemu::kernelAddress(::mtc::cudaemu::dependent<"
                   f"decltype(mtcEmuD)>({name})); }})")
        # The kernel's name may span lines (its template arguments): its
        # newlines go first, so that the lines after keep their numbers.
        call = ("\n" * text.count("\n", start, at) +
                f"::mtc::cudaemu::Launch({address}, "
                f"\"{name}\", {config}){between}.run([=](auto... mtcEmuArgs) "
                f"{{ {name}(mtcEmuArgs...); }}")
        call += f", {args})" if args.strip() else ")"
        return start, end + 1, call

    return rewrite(text, "<<<", launch)


def rewrite_shared(text):
    return EXTERN_SHARED.sub(
        lambda m: (f"{m.group(1)} *{m.group(2)} = reinterpret_cast<{m.group(1)} *>"
                   f"(::mtc::cudaemu::dynamicShared());"),
        text)


DECLARED_NAME = re.compile(r"(\w+)\s*(?:\[[^;]*)?$")


def rewrite_static_shared(path, text):
    def declaration(at):
        end = at + len("__shared__")
        semi = text.find(";", end)
        if semi < 0 or "{" in text[end:semi]:
            fail(path, text, at, "a __shared__ declaration without its ';'")
        names = []
        for part in split_top_level(text[end:semi]):
            m = DECLARED_NAME.search(part.strip())
            if not m:
                fail(path, text, at, "cannot find the name a __shared__ "
                     "declaration declares")
            names.append(m.group(1))
        fills = "".join(f" ::mtc::cudaemu::freshShared(&{n}, sizeof({n}));"
                        for n in names)
        return at, semi + 1, "static" + text[end:semi + 1] + fills

    return rewrite(text, "__shared__", declaration)


def rewrite_launch_bounds(path, text):
    def bounds(at):
        paren = at + len("__launch_bounds__")
        while paren < len(text) and text[paren].isspace():
            paren += 1
        if paren >= len(text) or text[paren] != "(":
            # Not a use (the name in a string, say): left as it is.
            return at, at + len("__launch_bounds__"), "__launch_bounds__"
        close = matching(text, paren, "(", ")")
        if close < 0:
            fail(path, text, at, "__launch_bounds__ without its arguments")
        most = split_top_level(text[paren + 1:close])[0].strip()
        params = text.find("(", close + 1)
        params_end = matching(text, params, "(", ")") if params >= 0 else -1
        if params_end < 0:
            fail(path, text, at, "__launch_bounds__ without a parameter list")
        name = (text[close + 1:params].split() or [""])[-1]
        if not re.fullmatch(r"\w+", name):
            fail(path, text, at, "cannot find the name of the kernel "
                 "__launch_bounds__ is on")
        body = params_end + 1
        while body < len(text) and text[body].isspace():
            body += 1
        # The bounds' own text goes, its newlines kept.
        kept = "\n" * text.count("\n", at, close + 1) + text[close + 1:body]
        if body >= len(text) or text[body] != "{":  # a declaration
            return at, body, kept
        check = (f" if (!::mtc::cudaemu::withinLaunchBounds({most}, "
                 f"\"{name}\")) return;")
        return at, body + 1, kept + "{" + check

    return rewrite(text, "__launch_bounds__", bounds)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    source, target = sys.argv[1], sys.argv[2]
    with open(source) as f:
        text = f.read()
    text = rewrite_launches(source, rewrite_launch_bounds(
        source, rewrite_static_shared(source, rewrite_shared(text))))
    with open(target, "w") as f:
        f.write(f'#line 1 "{source}"\n')
        f.write(text)


if __name__ == "__main__":
    main()
