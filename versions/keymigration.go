package versions

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/api"
)

// KeyMigration moves one resource's objects from the key range From (the resource's
// Prefix) to To while releases N and N−1 run side by side, through the phases of
// Teleport's RFD 126 (api.KeyPhaseOld … api.KeyPhaseDelete). The phase is a replicated
// record (KeyPhaseKey); the typed API of every node follows it (Plan), so each node
// applies the same phase from the same revision on.
//
// Example, widgets-v2-keys from /registry/apps/widgets/ to /registry/apps/v2/widgets/:
// in phase 1 a PUT of w1 writes both /registry/apps/widgets/w1 and
// /registry/apps/v2/widgets/w1 (the latter with Ops applied) in one transaction that
// also compares the phase record's mod revision; in phase 3 the leader copies every
// old key that has no new key; in phase 5 it deletes the old keys.
type KeyMigration struct {
	Name     string
	Resource string // "group/name"
	From, To string
	// Ops are applied, in order, to an object written to or copied to the new key; the
	// inverse ops, in reverse order, to one read from the new key.
	Ops []FieldOp
	// Auto ("advance: auto"): the leader advances the migration by itself, one phase at a
	// time, whenever the rules allow and the phase has lasted MinDwell. Off ("manual",
	// the default): only an operator's advance moves it.
	Auto     bool
	MinDwell time.Duration
	// AutoFinalize ("autoFinalize: true", auto only): the automatic walk also takes
	// phase 5, which deletes the old keys and cannot be rolled back once it has. Off
	// (the default), "advance: auto" stops in phase 4 and an operator's advance takes 5.
	AutoFinalize bool
	Line         int // of the declaration, for messages
}

// Sentinel errors of key migrations.
var (
	// ErrKeyMigrationLossy: the migration's ops drop values, so new keys cannot be
	// copied back to old ones (a rollback from phase 4 is refused).
	ErrKeyMigrationLossy = errors.New("versions: key migration ops lose values")
)

const (
	keyPhasePrefix = SystemPrefix + "keymigrations/"
	keyWorkPrefix  = SystemPrefix + "keymigration-work/"
)

// KeyPhaseKey is where the phase record of key migration name is stored.
func KeyPhaseKey(name string) string { return keyPhasePrefix + name }

// KeyWorkKey is where the checkpoint of key migration name's background work is stored.
func KeyWorkKey(name string) string { return keyWorkPrefix + name }

// NewKey is the new key of the object stored at old key (which is under From).
func (k *KeyMigration) NewKey(old []byte) []byte {
	return append([]byte(k.To), old[len(k.From):]...)
}

// OldKey is the old key of the object stored at new key (which is under To).
func (k *KeyMigration) OldKey(nk []byte) []byte {
	return append([]byte(k.From), nk[len(k.To):]...)
}

// Lossy reports whether Ops drop values (a copy back to old keys would lose them).
func (k *KeyMigration) Lossy() bool {
	for _, op := range k.Ops {
		if op.Kind == OpDrop {
			return true
		}
	}
	return false
}

// ToNew returns value (a stored object) as it is stored under the new key: Ops applied.
// Without ops it is value itself.
func (k *KeyMigration) ToNew(value []byte) ([]byte, error) {
	if len(k.Ops) == 0 {
		return value, nil
	}
	return k.applyOps(value, true)
}

// ToOld returns value read from a new key as the object it stands for under the old
// key: the inverse ops applied in reverse order. Without ops it is value itself.
func (k *KeyMigration) ToOld(value []byte) ([]byte, error) {
	if len(k.Ops) == 0 {
		return value, nil
	}
	return k.applyOps(value, false)
}

func (k *KeyMigration) applyOps(value []byte, forward bool) ([]byte, error) {
	obj, err := DecodeObject(value)
	if err != nil {
		return nil, err
	}
	cp, err := deepCopy(obj, "")
	if err != nil {
		return nil, err
	}
	w := &walk{obj: cp.(map[string]any)}
	for i := range k.Ops {
		var err error
		if forward {
			err = w.forward(&k.Ops[i])
		} else {
			err = w.backward(&k.Ops[len(k.Ops)-1-i])
		}
		if err != nil {
			return nil, fmt.Errorf("%w: key migration %s: %v", ErrConversion, k.Name, err)
		}
	}
	return json.Marshal(w.obj)
}

// KeyPlan is where the typed API reads and writes a resource in one phase.
type KeyPlan struct {
	// ReadNew: objects are read from the new key (else the old one); Fallback: when the
	// new key is absent, from the old one.
	ReadNew, Fallback bool
	// WriteOld, WriteNew: writes and deletes go to these keys, in one transaction.
	WriteOld, WriteNew bool
}

// Plan is the KeyPlan of a phase record (nil: phase 0):
//
//	phase  read             write
//	0      old              old
//	1      old              old + new
//	2, 3   new, else old    old + new
//	4      new              new        (old + new while a rollback copies back)
//	5      new              new
func Plan(rec *api.KeyPhaseRecord) KeyPlan {
	phase := 0
	if rec != nil {
		phase = rec.Phase
	}
	switch {
	case phase <= api.KeyPhaseOld:
		return KeyPlan{WriteOld: true}
	case phase == api.KeyPhaseMirror:
		return KeyPlan{WriteOld: true, WriteNew: true}
	case phase <= api.KeyPhaseCopy:
		return KeyPlan{ReadNew: true, Fallback: true, WriteOld: true, WriteNew: true}
	case phase == api.KeyPhaseNew && rec.RollbackTo != nil:
		return KeyPlan{ReadNew: true, WriteOld: true, WriteNew: true}
	default:
		return KeyPlan{ReadNew: true, WriteNew: true}
	}
}

// ListNew reports whether lists and watches of the phase scan the new range (phases 4
// and 5); before, they scan the old range, which holds every object in phases 0–3
// (writes since phase 1 reach both ranges), overlaid with the new keys in 2 and 3.
func (p KeyPlan) ListNew() bool { return p.ReadNew && !p.Fallback }

// ReadKeyPhase reads key migration name's phase record from view; absent is phase 0
// with Revision 0.
func ReadKeyPhase(view *fsm.View, name string) (*api.KeyPhaseRecord, error) {
	return ReadKeyPhaseAt(view, name, 0)
}

// ReadKeyPhaseAt is ReadKeyPhase as of revision rev (0: the view's latest).
func ReadKeyPhaseAt(view *fsm.View, name string, rev int64) (*api.KeyPhaseRecord, error) {
	kv, err := view.Get([]byte(KeyPhaseKey(name)), rev)
	found := err == nil
	if errors.Is(err, fsm.ErrKeyNotFound) {
		err = nil
	}
	if err != nil {
		return nil, err
	}
	if !found {
		return &api.KeyPhaseRecord{Name: name}, nil
	}
	return decodeKeyPhase(name, kv.Value, kv.ModRevision)
}

// decodeKeyPhase decodes a stored phase record: JSON, a phase in 0..5 and, when set, a
// rollback target before phase 4. Anything else is an error naming the migration.
func decodeKeyPhase(name string, value []byte, rev int64) (*api.KeyPhaseRecord, error) {
	rec := &api.KeyPhaseRecord{Name: name}
	if err := json.Unmarshal(value, rec); err != nil {
		return nil, fmt.Errorf("decode key migration phase of %s: %w", name, err)
	}
	if rec.Phase < 0 || rec.Phase > api.KeyPhaseMax {
		return nil, fmt.Errorf("key migration %s: stored phase %d out of range", name, rec.Phase)
	}
	if rec.RollbackTo != nil && (*rec.RollbackTo < 0 || *rec.RollbackTo >= api.KeyPhaseNew) {
		return nil, fmt.Errorf("key migration %s: stored rollback target %d out of range", name, *rec.RollbackTo)
	}
	rec.Name, rec.Revision = name, rev
	return rec, nil
}

// ReadKeyWork reads key migration name's work checkpoint from view; nil when absent.
func ReadKeyWork(view *fsm.View, name string) (*api.KeyWork, error) {
	kv, found, err := recordAt(view, KeyWorkKey(name))
	if err != nil || !found {
		return nil, err
	}
	var w api.KeyWork
	if err := json.Unmarshal(kv.Value, &w); err != nil {
		return nil, fmt.Errorf("decode key migration work of %s: %w", name, err)
	}
	w.Revision = kv.ModRevision
	return &w, nil
}

// KeyMigrations returns every key migration the schema declares.
func (s *Schema) KeyMigrations() []*KeyMigration {
	if s == nil {
		return nil
	}
	var out []*KeyMigration
	for _, r := range s.Resources {
		if r.KeyMigration != nil {
			out = append(out, r.KeyMigration)
		}
	}
	return out
}

// KeyMigrationNamed returns the declared key migration name and its resource, or nils.
func (s *Schema) KeyMigrationNamed(name string) (*KeyMigration, *Resource) {
	if s == nil {
		return nil, nil
	}
	for _, r := range s.Resources {
		if r.KeyMigration != nil && r.KeyMigration.Name == name {
			return r.KeyMigration, r
		}
	}
	return nil, nil
}

// OwnsKey reports whether key is under a prefix the schema's typed API owns: a
// resource's prefix or a key migration's new range.
func (s *Schema) OwnsKey(key string) bool {
	for _, r := range s.Resources {
		if strings.HasPrefix(key, r.Prefix) || (r.KeyMigration != nil && strings.HasPrefix(key, r.KeyMigration.To)) {
			return true
		}
	}
	return false
}

// keyMigrations parses a resource's keyMigrations: at most one, whose from is the
// resource's prefix and whose to is a distinct, non-overlapping prefix.
func (p *parser) keyMigrations(r *Resource, m map[string]*yaml.Node) error {
	items, err := p.seq(m, "keyMigrations")
	if err != nil {
		return err
	}
	if len(items) > 1 {
		return p.errf(items[1], "resource %s declares %d key migrations: at most one at a time (finish one, "+
			"then declare the next)", r.Key(), len(items))
	}
	for _, n := range items {
		km, err := p.fields(n, "key migration", "name", "from", "to", "ops", "advance", "minDwell",
			"autoFinalize")
		if err != nil {
			return err
		}
		k := &KeyMigration{Resource: r.Key(), Line: n.Line}
		var nl, fl, tl int
		if k.Name, nl, err = p.str(km, "name"); err != nil {
			return err
		}
		if k.Name == "" || len(k.Name) > 63 || !nameRE.MatchString(k.Name) {
			return p.errAt(lineOr(nl, n), "key migration name %q must be 1 to 63 lowercase letters, digits and '-'", k.Name)
		}
		if k.From, fl, err = p.str(km, "from"); err != nil {
			return err
		}
		if k.From != r.Prefix {
			return p.errAt(lineOr(fl, n), "key migration %s: from %q must be the prefix %q of %s",
				k.Name, k.From, r.Prefix, r.Key())
		}
		if k.To, tl, err = p.str(km, "to"); err != nil {
			return err
		}
		tl = lineOr(tl, n)
		if !strings.HasPrefix(k.To, "/") || !strings.HasSuffix(k.To, "/") || len(k.To) < 2 {
			return p.errAt(tl, "key migration %s: to %q must start and end with \"/\"", k.Name, k.To)
		}
		if strings.HasPrefix(k.To, k.From) || strings.HasPrefix(k.From, k.To) {
			return p.errAt(tl, "key migration %s: to %q overlaps from %q", k.Name, k.To, k.From)
		}
		if k.Ops, err = p.ops(km); err != nil {
			return err
		}
		if err := p.keyAdvance(k, km, n); err != nil {
			return err
		}
		r.KeyMigration = k
	}
	return nil
}

// keyAdvance parses "advance: manual|auto", and "minDwell: DURATION" and
// "autoFinalize: BOOL" (auto only).
func (p *parser) keyAdvance(k *KeyMigration, km map[string]*yaml.Node, n *yaml.Node) error {
	adv, al, err := p.str(km, "advance")
	if err != nil {
		return err
	}
	switch adv {
	case "", "manual":
	case "auto":
		k.Auto = true
	default:
		return p.errAt(lineOr(al, n), "key migration %s: advance %q: want manual or auto", k.Name, adv)
	}
	if k.AutoFinalize, err = p.boolean(km, "autoFinalize"); err != nil {
		return err
	}
	if k.AutoFinalize && !k.Auto {
		return p.errAt(km["autoFinalize"].Line, "key migration %s: autoFinalize is for advance: auto", k.Name)
	}
	dwell, dl, err := p.str(km, "minDwell")
	if err != nil {
		return err
	}
	if dwell == "" {
		return nil
	}
	if !k.Auto {
		return p.errAt(dl, "key migration %s: minDwell is for advance: auto", k.Name)
	}
	if k.MinDwell, err = time.ParseDuration(dwell); err != nil || k.MinDwell < 0 {
		return p.errAt(dl, "key migration %s: minDwell %q: want a duration such as 30s or 10m", k.Name, dwell)
	}
	return nil
}

// keyMigrationOverlaps refuses a key migration of r or o whose new range overlaps the
// other resource's prefix or new range, or two key migrations of the same name.
func (p *parser) keyMigrationOverlaps(r, o *Resource, oLine int) error {
	over := func(a, b string) bool { return strings.HasPrefix(a, b) || strings.HasPrefix(b, a) }
	if k := r.KeyMigration; k != nil {
		if over(k.To, o.Prefix) {
			return p.errAt(k.Line, "key migration %s: to %q overlaps prefix %q of %s (line %d)",
				k.Name, k.To, o.Prefix, o.Key(), oLine)
		}
		if ok := o.KeyMigration; ok != nil && over(k.To, ok.To) {
			return p.errAt(k.Line, "key migration %s: to %q overlaps to %q of key migration %s (line %d)",
				k.Name, k.To, ok.To, ok.Name, ok.Line)
		}
		if ok := o.KeyMigration; ok != nil && ok.Name == k.Name {
			return p.errAt(k.Line, "duplicate key migration name %q (first at line %d)", k.Name, ok.Line)
		}
	}
	if ok := o.KeyMigration; ok != nil && over(ok.To, r.Prefix) {
		return p.errAt(ok.Line, "key migration %s: to %q overlaps prefix %q of %s", ok.Name, ok.To, r.Prefix, r.Key())
	}
	return nil
}
