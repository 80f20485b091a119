# Sourced by the evidence scripts (far_evidence.sh, perhead_evidence.sh):
# run NAME ARGS... runs "$B" ARGS > "$OUT/NAME.json" (stderr in NAME.err),
# unless that result is already there, so an interrupted script resumes.
run() {
    local name=$1; shift
    [ -s "$OUT/$name.json" ] && return 0
    echo "== $name: subq $*" >&2
    local t0=$(date +%s)
    if "$B" "$@" > "$OUT/$name.json.part" 2> "$OUT/$name.err"; then
        mv "$OUT/$name.json.part" "$OUT/$name.json"
        echo "   $(( $(date +%s) - t0 )) s" >&2
    else
        echo "   failed: $(tail -1 "$OUT/$name.err")" >&2
    fi
}
