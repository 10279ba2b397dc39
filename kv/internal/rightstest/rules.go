package rightstest

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
)

// The rules table: the core's rules other than rights — key limits and UTF-8, the
// value limit, the txn body limit, the list limit, keel's reserved prefix, the duplicate-key rule, the
// guards a delete may carry — each broken by one
// operation that every door carries, sent with every right (Fixture.Mgmt) so that only
// the rule can refuse it. Each door must refuse each case with the rule's answer and
// change nothing.

// Rule is the answer a broken rule gets, in HTTP's terms (Answer).
type Rule struct {
	Code   int
	Reason string
}

var (
	RuleInvalid   = Rule{http.StatusBadRequest, api.ReasonBadRequest}
	RuleTooLarge  = Rule{http.StatusRequestEntityTooLarge, api.ReasonTooLarge}
	RuleReserved  = Rule{http.StatusForbidden, api.ReasonReservedPrefix}
	RuleDuplicate = Rule{http.StatusBadRequest, api.ReasonDuplicateKey}
)

// RuleCase is one row of the rules table: Op breaks Rule. Msg, when set, is what the
// refusal's message says on every door whose messages are keel's (not Answer.Fixed):
// the core's words, whichever door carried the operation.
type RuleCase struct {
	Name string
	Rule Rule
	Op   Op
	Msg  string
}

// reservedKey is a key under keel's own records (versions.SystemPrefix).
const reservedKey = "\x00keel/rules-table"

// RuleCases is the table, for the default configuration's limits.
var RuleCases = func() []RuleCase {
	cfg := kv.DefaultConfig()
	long := "app/" + strings.Repeat("k", cfg.MaxKeyBytes)
	put := func(k string) api.Op { return api.Op{Type: api.OpPut, Key: k, Value: []byte("v")} }
	// A txn body one byte over the limit that is otherwise a valid empty transaction
	// (JSON allows the trailing blanks).
	bigTxn := append([]byte(`{"success":[]}`), bytes.Repeat([]byte(" "), int(cfg.MaxTxnBodyBytes))...)
	return []RuleCase{
		{"put of a key over the limit", RuleInvalid, Op{Kind: Put, Key: long}, ""},
		{"put of a key that is not UTF-8", RuleInvalid, Op{Kind: Put, Key: "app/\xff"}, ""},
		{"get of a key that is not UTF-8", RuleInvalid, Op{Kind: Get, Key: "app/\xff"}, ""},
		{"put of a value over the limit", RuleTooLarge, Op{Kind: Put, Key: Key,
			Value: bytes.Repeat([]byte("v"), int(cfg.MaxValueBytes)+1)}, ""},
		{"txn put of a key over the limit", RuleInvalid, Op{Kind: Txn, Txn: api.TxnRequest{
			Success: []api.Op{put(long)}}}, ""},
		{"txn put under keel's reserved prefix", RuleReserved, Op{Kind: Txn, Txn: api.TxnRequest{
			Success: []api.Op{put(reservedKey)}}}, ""},
		{"txn writing one key twice", RuleDuplicate, Op{Kind: Txn, Txn: api.TxnRequest{
			Success: []api.Op{put(Other + "d"), put(Other + "d")}}}, ""},
		{Name: "txn body over the limit", Rule: RuleTooLarge, Op: Op{Kind: Txn, Body: bigTxn},
			Msg: fmt.Sprintf("txn body is more than the maximum %d bytes", cfg.MaxTxnBodyBytes)},
		{Name: "range with a limit over the maximum", Rule: RuleInvalid,
			Op:  Op{Kind: Range, Key: "app/", Limit: int64(cfg.MaxListLimit) + 1},
			Msg: fmt.Sprintf("limit %d must be in [0, %d]", cfg.MaxListLimit+1, cfg.MaxListLimit)},
		{Name: "txn ranged get with a limit over the maximum", Rule: RuleInvalid, Op: Op{Kind: Txn, Txn: api.TxnRequest{
			Success: []api.Op{{Type: api.OpGet, Key: "app/", Prefix: true, Limit: int64(cfg.MaxListLimit) + 1}}}},
			Msg: fmt.Sprintf("limit %d must be in [0, %d]", cfg.MaxListLimit+1, cfg.MaxListLimit)},
		{Name: "delete guarded on mod revision 0", Rule: RuleInvalid,
			Op:  Op{Kind: Delete, Key: Key, HasPrev: true, Prev: 0},
			Msg: "prev_revision of a delete must be at least 1"},
		{Name: "prefix delete guarded on a mod revision", Rule: RuleInvalid,
			Op:  Op{Kind: DeleteRange, Key: "app/", HasPrev: true, Prev: 1},
			Msg: "prev_revision cannot be combined with a prefix delete"},
	}
}()

// RunRuleCases runs every rule case through d with every right: each is refused with
// its rule's answer (a door whose answers are fixed, Answer.Fixed, with its code) in
// the core's words (RuleCase.Msg), and nothing changes. A case d does not serve
// (NotServed) is skipped.
func RunRuleCases(t *testing.T, f *Fixture, d Door) {
	t.Helper()
	before := f.Store.FSM().Revision()
	for _, c := range RuleCases {
		a := d.Do(t, f.Mgmt, c.Op)
		switch {
		case a.NotServed:
		case a.Code != c.Rule.Code || (!a.Fixed && a.Reason != c.Rule.Reason):
			t.Errorf("%s: %d %s %q; want %d %s", c.Name, a.Code, a.Reason, a.Msg, c.Rule.Code, c.Rule.Reason)
		case !a.Fixed && !strings.Contains(a.Msg, c.Msg):
			t.Errorf("%s: message %q; want it to say %q", c.Name, a.Msg, c.Msg)
		}
	}
	if after := f.Store.FSM().Revision(); after != before {
		t.Errorf("refused operations moved the revision %d → %d", before, after)
	}
}
