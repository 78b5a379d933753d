#!/usr/bin/env python3
"""Only src/reply_class.c reads an error reply's text (issue 26.3): any other comparison
(strcmp, strncmp, strcasecmp, strstr) of src/ that may be of a reply's text fails here.

A comparison is suspect when it
  - spells a word of the classifier's table (taken from reply_class.c, so a word added
    there is held here too) as the start of a string literal ("NOPERM", "MOVED ", ...), or
  - compares a reply's text (->str, or dtq_reply_detail(...)), unless the reply's type is
    shown to be STRING or STATUS on that line or the two before (not an error reply), or
  - compares a variable named err/errstr/error.
A line may be let through by a "reply-text:" comment on it or the three lines before,
saying why the text must be read (a Function saying what is missing only in its text).
Usage: reply_text.py SOURCE_DIR    (reply_text.py --self-test checks the checker)"""
import glob
import os
import re
import sys

CMP = re.compile(r'\b(strn?cmp|strn?casecmp|strstr)\s*\(')
NOT_ERROR = re.compile(r'REDIS_REPLY_(STRING|STATUS)')
MARK = 'reply-text:'


def words(src):
    text = open(os.path.join(src, 'src', 'reply_class.c')).read()
    return [w for w in re.findall(r'\{"([^"]+)", DTQ_REPLY_', text) if w != 'OTHER']


def suspects(lines, vocab):
    lit = re.compile(r'"(%s)(["\s])' % '|'.join(re.escape(w) for w in vocab))
    for i, line in enumerate(lines):
        if not CMP.search(line):
            continue
        before = lines[max(0, i - 3):i]
        if MARK in line or any(MARK in b for b in before):
            continue
        why = None
        if lit.search(line):
            why = 'an error word'
        elif (re.search(r'->str\b', line) or 'dtq_reply_detail(' in line) and not (
                NOT_ERROR.search(line) or any(NOT_ERROR.search(b) for b in before[-2:])):
            why = "a reply's text"
        elif re.search(r'\b(strn?cmp|strn?casecmp|strstr)\s*\(\s*(err|errstr|error)\b', line):
            why = 'an error variable'
        if why:
            yield i + 1, why, line.strip()


def self_test(vocab):
    bad = ['if (!strncmp(r->str, "NOPERM", 6)) x();',
           'if (strstr(reply->str, "not found")) x();',
           'if (!strcmp(err, "x")) x();',
           'q = !strncmp(e, "MOVED ", 6);']
    good = ['if (r->type == REDIS_REPLY_STATUS && !strcmp(r->str, "OK")) x();',
            'if (!strcmp(cfg->name, "queue")) x();',
            '/* reply-text: why */\nif (!strncmp(dtq_reply_detail(r->str), "queue ", 6)) x();']
    ok = True
    for b in bad:
        if not list(suspects(b.split('\n'), vocab)):
            print('self-test: not flagged: %s' % b)
            ok = False
    for g in good:
        if list(suspects(g.split('\n'), vocab)):
            print('self-test: flagged: %s' % g)
            ok = False
    return ok


def main():
    src = sys.argv[1]
    vocab = words(src)
    if len(vocab) < 10 or not self_test(vocab):
        print('reply_text: the checker is broken (words read: %d)' % len(vocab))
        return 1
    fails = 0
    for path in sorted(glob.glob(os.path.join(src, 'src', '*.[ch]'))):
        if os.path.basename(path) in ('reply_class.c', 'reply_class.h'):
            continue
        for n, why, text in suspects(open(path).read().split('\n'), vocab):
            print('%s:%d: compares %s outside reply_class.c: %s' %
                  (os.path.relpath(path, src), n, why, text))
            fails += 1
    if fails:
        print('branch on dtq_reply_class_of() (src/reply_class.h) instead, or say why with a '
              '"reply-text:" comment')
    return 1 if fails else 0


if __name__ == '__main__':
    sys.exit(main())
