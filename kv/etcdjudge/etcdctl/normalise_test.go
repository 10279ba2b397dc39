package etcdctl

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// normaliser rewrites one backend's etcdctl output so that two servers that gave the
// same answers print the same text. Every rule is listed, with its reason, in
// README.md ("Normalisation"); nothing else is rewritten.
type normaliser struct {
	b   *backend
	w   *writes
	dir string            // the session's directory (files etcdctl writes)
	ids map[uint64]string // opaque IDs (cluster, member, lease) by first appearance
}

func newNormaliser(b *backend, w *writes, dir string) *normaliser {
	return &normaliser{b: b, w: w, dir: dir, ids: map[uint64]string{}}
}

// id names an opaque ID by the order it first appeared in the session's output.
func (n *normaliser) id(v uint64) string {
	if v == 0 {
		return "0"
	}
	if s, ok := n.ids[v]; ok {
		return s
	}
	s := fmt.Sprintf("ID%d", len(n.ids)+1)
	n.ids[v] = s
	return s
}

func (n *normaliser) hexID(h string) string {
	v, err := strconv.ParseUint(h, 16, 64)
	if err != nil {
		return "BADHEX(" + h + ")"
	}
	return n.id(v)
}

func (n *normaliser) rev(s string) string {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return "BADREV(" + s + ")"
	}
	return fmt.Sprintf("R%d", n.w.rank(v))
}

// output normalises a step's output line by line: JSON lines field by field, the
// rest by the text rules.
func (n *normaliser) output(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if t := strings.TrimSpace(l); strings.HasPrefix(t, "{") || strings.HasPrefix(t, "[") {
			if j, ok := n.jsonLine(t); ok {
				lines[i] = j
				continue
			}
		}
		lines[i] = n.text(l)
	}
	return strings.Join(lines, "\n")
}

var (
	reLeaseHex      = regexp.MustCompile(`lease ([0-9a-f]{16})\b`)
	reLockKey       = regexp.MustCompile(`(s/(?:lock|elect)[a-z0-9]*/)([0-9a-f]+)\b`)
	reTook          = regexp.MustCompile(`took (= )?[0-9.]+[a-zµ]+`)
	reLeaseLine     = regexp.MustCompile(`^[0-9a-f]{16}$`)       // lease list
	reServerVersion = regexp.MustCompile(`^Server version \S+$`) // snapshot save
	reAuthRev       = regexp.MustCompile(`^AuthRevision: \d+$`)
	reRemaining     = regexp.MustCompile(`TTL\((\d+)s\), remaining\((-?\d+)s\)`)
	reFields        = regexp.MustCompile(`^"(ClusterID|MemberID|Revision|CreateRevision|ModRevision|RaftTerm|Lease)" : (\d+)$`)
	reAttached      = regexp.MustCompile(`attached keys\(\[([^\]]*)\]\)`)
	reCompacted     = regexp.MustCompile(`(compacted revision |rev=|progress notify: )(\d+)`)
	reMemberRow     = regexp.MustCompile(`^([0-9a-f]+), (started|unstarted), [^,]*, [^,]*, ([^,]*), (true|false)$`)
	statusFields    = 16 // columns of `endpoint status` in etcdctl 3.7's simple and table output
)

// text applies the text rules to one line.
func (n *normaliser) text(l string) string {
	l = strings.ReplaceAll(l, n.b.addr, "ENDPOINT")
	l = strings.ReplaceAll(l, n.dir, "DIR")
	l = reServerVersion.ReplaceAllString(l, "Server version VERSION")
	l = reLeaseHex.ReplaceAllStringFunc(l, func(m string) string { return "lease " + n.hexID(m[len("lease "):]) })
	l = reLockKey.ReplaceAllStringFunc(l, func(m string) string {
		sm := reLockKey.FindStringSubmatch(m)
		return sm[1] + n.hexID(sm[2])
	})
	l = reTook.ReplaceAllString(l, "took ${1}DURATION")
	if reLeaseLine.MatchString(l) {
		l = n.hexID(l)
	}
	l = reAuthRev.ReplaceAllString(l, "AuthRevision: AUTHREV")
	l = reRemaining.ReplaceAllStringFunc(l, func(m string) string {
		sm := reRemaining.FindStringSubmatch(m)
		return fmt.Sprintf("TTL(%ss), remaining(%s)", sm[1], remaining(sm[1], sm[2]))
	})
	l = reAttached.ReplaceAllStringFunc(l, func(m string) string {
		keys := strings.Fields(reAttached.FindStringSubmatch(m)[1])
		slices.Sort(keys) // etcd lists a lease's keys from a map: in no order
		return "attached keys([" + strings.Join(keys, " ") + "])"
	})
	l = reCompacted.ReplaceAllStringFunc(l, func(m string) string {
		sm := reCompacted.FindStringSubmatch(m)
		return sm[1] + n.rev(sm[2])
	})
	if sm := reFields.FindStringSubmatch(l); sm != nil { // -w fields
		l = fmt.Sprintf("%q : %v", sm[1], n.jsonNumber(fieldsJSON[sm[1]], json.Number(sm[2])))
	}
	if sm := reMemberRow.FindStringSubmatch(l); sm != nil {
		l = fmt.Sprintf("%s, %s, NAME, PEERURLS, %s, %s", n.hexID(sm[1]), sm[2], sm[3], sm[4])
	}
	if f := strings.Split(l, ", "); len(f) == statusFields && strings.TrimPrefix(f[0], "http://") == "ENDPOINT" { // --cluster: a URL
		l = n.statusRow(f)
	}
	return l
}

// fieldsJSON names the `-w fields` lines as the JSON rules do.
var fieldsJSON = map[string]string{"ClusterID": "cluster_id", "MemberID": "member_id", "Revision": "revision",
	"CreateRevision": "create_revision", "ModRevision": "mod_revision", "RaftTerm": "raft_term", "Lease": "lease"}

// statusRow keeps of an `endpoint status` row the endpoint, member ID, leader and
// learner flags, errors and downgrade columns.
func (n *normaliser) statusRow(f []string) string {
	f[1] = n.hexID(f[1])
	for _, i := range []int{2, 3} {
		f[i] = "VERSION"
	}
	for _, i := range []int{4, 5, 6, 7} {
		f[i] = "SIZE"
	}
	f[10], f[11], f[12] = "TERM", "INDEX", "INDEX"
	return strings.Join(f, ", ")
}

// remaining judges a lease's remaining TTL against its granted TTL: a fresh lease
// has nearly all of it left.
func remaining(granted, left string) string {
	g, _ := strconv.Atoi(granted)
	r, _ := strconv.Atoi(left)
	if r > 0 && r <= g && g-r <= 10 {
		return "OK"
	}
	return fmt.Sprintf("BAD %ds of %ds", r, g)
}

// jsonLine normalises one line of `-w json` output.
func (n *normaliser) jsonLine(s string) (string, bool) {
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return "", false
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(n.jsonValue("", v)); err != nil {
		return "", false
	}
	return strings.TrimSpace(buf.String()), true
}

func (n *normaliser) jsonValue(key string, v any) any {
	switch x := v.(type) {
	case map[string]any:
		return n.jsonObject(x)
	case []any:
		for i := range x {
			x[i] = n.jsonValue(key, x[i])
		}
		return x
	case json.Number:
		return n.jsonNumber(key, x)
	case string:
		return n.jsonString(key, x)
	}
	return v
}

func (n *normaliser) jsonObject(m map[string]any) any {
	for _, f := range [][2]string{{"grantedTTL", "TTL"}, {"granted-ttl", "ttl"}} { // TimeToLive: TTL is what remains
		g, ok1 := m[f[0]].(json.Number)
		t, ok2 := m[f[1]].(json.Number)
		if ok1 && ok2 {
			m[f[1]] = "remaining(" + remaining(g.String(), t.String()) + ")"
		}
	}
	if st, ok := m["Status"].(map[string]any); ok { // endpoint status
		for _, k := range []string{"version", "storageVersion"} {
			if _, ok := st[k]; ok {
				st[k] = "VERSION"
			}
		}
		delete(st, "dbSizeQuota") // keel has no quota: 0, left out of the JSON
	}
	if _, ok := m["level"]; ok && m["msg"] != nil { // etcdctl's or its client's log line
		for k := range m {
			if k != "level" && k != "msg" && k != "method" && k != "error" {
				delete(m, k)
			}
		}
	}
	if evs, ok := m["Events"].([]any); ok && len(evs) > 0 { // a watch response
		watchHeader(m, evs)
	}
	keys := slices.Sorted(maps.Keys(m)) // IDs are numbered in a fixed order
	for _, k := range keys {
		m[k] = n.jsonValue(k, m[k])
	}
	if ks, ok := m["keys"].([]any); ok { // a lease's keys: etcd lists them from a map
		slices.SortFunc(ks, func(a, b any) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
	}
	return m
}

// watchHeader replaces the header revision of a watch response that carries events
// by whether it is at or after its last event (all that etcd and keel both promise;
// README.md, accepted differences).
func watchHeader(m map[string]any, evs []any) {
	h, _ := m["Header"].(map[string]any)
	last, _ := evs[len(evs)-1].(map[string]any)
	kv, _ := last["kv"].(map[string]any)
	hr, err1 := jsonInt(h["revision"])
	er, err2 := jsonInt(kv["mod_revision"])
	switch {
	case err1 != nil || err2 != nil:
		h["revision"] = "MISSING"
	case hr >= er:
		h["revision"] = "AT_OR_AFTER_LAST_EVENT"
	default:
		h["revision"] = "BEFORE_LAST_EVENT"
	}
}

func jsonInt(v any) (int64, error) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Errorf("not a number: %v", v)
	}
	return n.Int64()
}

func (n *normaliser) jsonNumber(key string, x json.Number) any {
	switch key {
	case "revision", "create_revision", "mod_revision", "compact_revision", "hash_revision":
		return n.rev(x.String())
	case "cluster_id", "member_id", "ID", "id", "leader", "lease":
		v, err := strconv.ParseUint(x.String(), 10, 64)
		if err != nil {
			return "BADID(" + x.String() + ")"
		}
		return n.id(v)
	case "raft_term", "raftTerm":
		return "TERM"
	case "raftIndex", "raftAppliedIndex":
		return "INDEX"
	case "dbSize", "dbSizeInUse", "dbSizeQuota":
		return "SIZE"
	case "hash":
		return "HASH"
	}
	return x
}

func (n *normaliser) jsonString(key, s string) any {
	switch key {
	case "key", "value", "keys":
		if b, err := base64.StdEncoding.DecodeString(s); err == nil {
			return n.text(string(b))
		}
	case "took":
		return "DURATION"
	case "name":
		return "NAME"
	case "peerURLs":
		return "PEERURL"
	}
	return n.text(s)
}
