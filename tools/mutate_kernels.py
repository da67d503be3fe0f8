#!/usr/bin/env python3
"""Kernel mutation testing: do the tests notice a wrong kernel?

Each mutant is one small change to one kernel file (a comparison flipped, && for ||, an index
off by one, min for max, a constant 0 for 1, + for *) in a copy of kernels/ that the tests load
through CLATTN_KERNEL_DIR, so nothing is rebuilt. The op's test programs then run under every
kernel variant of tests/meson.build until one fails (the mutant is killed). A mutant that every
run passes survived: either a test is missing, or the change cannot alter a result (an
equivalent mutant: a bound never reached, a padding value multiplied by 0) and the survivor
needs reading. Lines are printed as the runs end, and appended as JSON to --log.

    python3 tools/mutate_kernels.py merge.cl                  # every mutant of merge.cl
    python3 tools/mutate_kernels.py flash.cl --count 25       # 25 drawn at random (--seed)
    python3 tools/mutate_kernels.py decode.cl --list          # the mutants, without running
    python3 tools/mutate_kernels.py tile16.cl --lines 111-146 # those lines' only (resume a pass)

Run from the source directory after `ninja -C build`, on a quiet machine (a flash.cl mutant that
survives takes minutes: every test program under every variant, its kernels compiled anew).
"""
import argparse, json, os, random, re, shutil, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The test programs that exercise each kernel file, the most direct first.
TESTS = {
    'softmax.cl': ['softmax', 'loss', 'additive', 'backward'],
    'flash.cl': ['dot_product', 'varlen', 'differential', 'multihead', 'merge', 'backward'],
    'decode.cl': ['decode'],
    'matmul.cl': ['matmul', 'multihead'],
    'flash_backward.cl': ['backward'],
    'loss.cl': ['loss'],
    'additive.cl': ['additive', 'backward'],
    'heads.cl': ['heads', 'multihead'],
    'merge.cl': ['merge', 'decode'],
    'convert.cl': ['convert'],
    'dtype.cl': ['convert', 'softmax', 'matmul', 'decode'],
    'dropout.cl': ['dropout', 'dot_product'],
    'common.cl': ['softmax', 'dot_product', 'decode', 'backward', 'loss', 'merge'],
    'tile16.cl': ['dot_product', 'backward'],
    'update.cl': ['backward'],
}

# (pattern, replacement): one mutant per match.
OPERATORS = [
    (r'(?<![<>=!])<=(?!=)', '<'), (r'(?<![<>=!-])<(?![<=])', '<='),
    (r'(?<![<>=!-])>=(?!=)', '>'), (r'(?<![<>=!-])>(?![>=])', '>='),
    (r'==', '!='), (r'!=', '=='), (r'&&', '||'), (r'\|\|', '&&'),
    (r'(?<=[\w)\]] )\+ 1\b(?!\.)', '+ 2'), (r'(?<=[\w)\]] )- 1\b(?!\.)', '- 0'),
    (r'\bfmax\(', 'fmin('), (r'\bfmin\(', 'fmax('), (r'\bmax\(', 'min('), (r'\bmin\(', 'max('),
    (r'\b0\.0f\b', '1.0f'), (r'(?<![\w.])1\.0f\b', '0.5f'),
    (r'\+=', '-='), (r'(?<=\w) \* (?=\w)', ' + '),
]
# Comments, preprocessor conditionals and tunable defaults (#define NAME value) are not mutated.
SKIP = re.compile(r'^\s*(//|/\*|\*|#\s*(include|ifndef|ifdef|endif|else|if |elif|pragma|error|undef))'
                  r'|^\s*#define \w+ [\w.()-]+\s*(/\*.*)?$')


def variants():
    """The kernel variants of tests/meson.build's `variants` dict, and the softmax VW=8 one."""
    text = open(os.path.join(ROOT, 'tests', 'meson.build')).read()
    block = re.search(r'^variants = \{\n(.*?)^\}', text, re.S | re.M).group(1)
    found = dict(re.findall(r"^\s*'([^']*)': '([^']*)',", block, re.M))
    found['-cpu-vw8'] = 'softmax=cpu:VW=8'
    return found


def mutants(path):
    lines = open(path).read().split('\n')
    out, in_comment = [], False
    for n, line in enumerate(lines):
        if in_comment:
            in_comment = '*/' not in line
            continue
        if line.strip().startswith('/*') and '*/' not in line:
            in_comment = True
            continue
        if SKIP.match(line):
            continue
        code = re.split(r'//|/\*', line, maxsplit=1)[0]
        for pattern, repl in OPERATORS:
            for m in re.finditer(pattern, code):
                out.append((n, line, line[:m.start()] + repl + line[m.end():]))
    return lines, out


def run_mutant(kdir, tests, build, tunes, timeout):
    """The first (test, variant, status) that fails, or None."""
    for exe in tests:
        for name, tune in tunes.items():
            if name == '-cpu-vw8' and exe not in ('softmax', 'loss', 'additive'):
                continue
            env = dict(os.environ, CLATTN_KERNEL_DIR=kdir, CLATTN_TUNE_FILE='off',
                       CLATTN_TUNE=tune, CI='true')
            try:
                rc = subprocess.run([os.path.join(build, 'tests', 'test_' + exe)], env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    timeout=timeout).returncode
            except subprocess.TimeoutExpired:
                rc = 'timeout'
            if rc != 0:
                return exe, name or '(default)', rc
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('file', help='a kernel file, e.g. softmax.cl')
    ap.add_argument('--count', type=int, default=0, help='mutants drawn at random (0: all)')
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--build', default=os.path.join(ROOT, 'build'))
    ap.add_argument('--tests', help='comma-separated test programs (default: the file\'s)')
    ap.add_argument('--timeout', type=int, default=300, help='seconds per test run')
    ap.add_argument('--log', default='mutants.jsonl')
    ap.add_argument('--list', action='store_true', help='print the mutants and stop')
    ap.add_argument('--lines', help='FIRST-LAST: only the mutants of these lines (1-based)')
    a = ap.parse_args()
    src = os.path.join(ROOT, 'kernels')
    lines, ms = mutants(os.path.join(src, a.file))
    tests = a.tests.split(',') if a.tests else TESTS.get(a.file)
    if not tests:
        sys.exit(f'{a.file}: no test programs known; give --tests')
    order = list(range(len(ms)))
    if a.lines:
        first, last = (int(x) for x in a.lines.split('-'))
        order = [i for i in order if first <= ms[i][0] + 1 <= last]
    if 0 < a.count < len(order):
        order = sorted(random.Random(a.seed).sample(order, a.count))
    if not order:
        sys.exit(f'{a.file}: no mutants on lines {a.lines}')
    print(f'{a.file}: {len(ms)} mutants, running {len(order)} through {", ".join(tests)}',
          flush=True)
    tunes, killed = variants(), 0
    with tempfile.TemporaryDirectory(prefix='clattn-mutant-') as tmp, open(os.devnull if a.list else a.log, 'a') as log:
        kdir = os.path.join(tmp, 'kernels')
        for i in order:
            n, old, new = ms[i]
            if a.list:
                print(f'{a.file}:{n + 1}: {new.strip()}')
                continue
            shutil.rmtree(kdir, ignore_errors=True)
            shutil.copytree(src, kdir)
            with open(os.path.join(kdir, a.file), 'w') as f:
                f.write('\n'.join(lines[:n] + [new] + lines[n + 1:]))
            t0 = time.time()
            by = run_mutant(kdir, tests, a.build, tunes, a.timeout)
            killed += by is not None
            status = f'killed by {by[0]} {by[1]} ({by[2]})' if by else 'SURVIVED'
            print(f'{a.file}:{n + 1}: {status}, {time.time() - t0:.0f} s\n  - {old.strip()}\n'
                  f'  + {new.strip()}', flush=True)
            log.write(json.dumps({'file': a.file, 'line': n + 1, 'old': old, 'new': new,
                                  'killed_by': by}) + '\n')
            log.flush()
    if not a.list:
        print(f'{a.file}: {killed} of {len(order)} killed')


if __name__ == '__main__':
    main()
