# What a program's --help lists, for tests/scripts/man_pages.sh and tests/scripts/completion.sh.
# shellcheck shell=bash

# help_options HELP_TEXT: every option token (-c, --config, ...) anywhere in the text,
# one per line, sorted.
help_options() {
    grep -oE '(^|[^A-Za-z0-9_-])--?[A-Za-z][A-Za-z0-9-]*' <<<"$1" |
        sed -E 's/^[^-]+//' | sort -u
}

# help_rows HELP_TEXT: the rows of dtqctl's "commands:" section, in order: "verb", or
# "verb sub" when the word after the verb is a lower-case word. A row starts with two
# blanks and a lower-case letter; its synopsis ends at two blanks.
help_rows() {
    awk '/^commands:$/ { on = 1; next }
         /^$/ { on = 0 }
         on && /^  [a-z]/ {
             syn = substr($0, 3); sub(/  .*/, "", syn); n = split(syn, w, " ")
             print (n > 1 && w[2] ~ /^[a-z][a-z-]*$/) ? w[1] " " w[2] : w[1]
         }' <<<"$1"
}

# help_row_options HELP_TEXT ROW: the [--options] of one row (on its line and the more
# indented lines under it), sorted.
help_row_options() {
    awk -v want="$2" '/^commands:$/ { on = 1; next }
         /^$/ { on = 0 }
         on && /^  [a-z]/ {
             syn = substr($0, 3); sub(/  .*/, "", syn); n = split(syn, w, " ")
             row = (n > 1 && w[2] ~ /^[a-z][a-z-]*$/) ? w[1] " " w[2] : w[1]
         }
         on && row == want { print }' <<<"$1" |
        grep -oE '\[--[a-z][a-z-]*' | tr -d '[' | sort -u
}

# help_global_options HELP_TEXT: the options of dtqctl's "options:" section, sorted.
# An option line starts with at most six blanks and a dash; its options end at two blanks.
help_global_options() {
    awk '/^options:$/ { on = 1; next } /^$/ { on = 0 }
         on && match($0, /^ +-/) && RLENGTH <= 7 { syn = $0; sub(/^ +/, "", syn); sub(/  .*/, "", syn); print syn }' <<<"$1" |
        tr ' ' '\n' | tr -d ',' | grep -E '^-' | sort -u
}
