package versions

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Sentinel errors. Every error returned by this package wraps exactly one of
// them; test with errors.Is.
var (
	// ErrBadSchema: the schema file is unreadable as a schema or fails
	// validation. The error text reads "FILE:LINE: problem".
	ErrBadSchema = errors.New("versions: bad schema")
	// ErrUnknownVersion: a version name that the resource does not declare.
	ErrUnknownVersion = errors.New("versions: unknown version")
	// ErrBadObject: the object given to Convert is not a decoded JSON
	// object, or its apiVersion does not match the version it is said to be.
	ErrBadObject = errors.New("versions: bad object")
	// ErrConversion: a conversion op could not be applied to the object.
	ErrConversion = errors.New("versions: conversion failed")
)

// MaxSchemaSize is the largest schema file accepted, in bytes.
const MaxSchemaSize = 1 << 20

// Schema is a validated schema file. It is immutable after ParseSchema
// returns and safe for concurrent use.
type Schema struct {
	File      string      // file name as given (for messages)
	Resources []*Resource // sorted by Group then Name
}

// Resource is one typed resource: JSON objects stored under Prefix, encoded in
// one of Versions.
type Resource struct {
	Group, Name, Prefix string
	// Versions lists every declared version, oldest first, as declared.
	Versions []Version
	// Preferred is this node's preferred encoding version; always declared.
	Preferred string
	// Conversions has one step per adjacent pair of Versions, in order:
	// Conversions[i] converts Versions[i] to Versions[i+1].
	Conversions []Conversion
	// KeyMigration, when declared, moves the resource's objects from Prefix to a new
	// key range through the phases of RFD 126 (see KeyMigration); nil otherwise.
	KeyMigration *KeyMigration
}

// Version is one declared version of a resource.
type Version struct {
	Name   string
	Served bool // "served" in the file; false when omitted
}

// Conversion converts an object from version From to the next declared
// version To by applying Ops in order; the inverse applies the inverse ops in
// reverse order.
type Conversion struct {
	From, To string
	Ops      []FieldOp
}

// FieldOp is one declarative field operation of a conversion step.
// Paths are dotted: each segment is a JSON object key.
type FieldOp struct {
	Kind     string // "rename", "default", "drop"
	From, To string // rename: dotted paths
	Field    string // default, drop: dotted path
	// Value is the default's value as a JSON value: nil, bool, float64,
	// string, map[string]any or []any.
	Value any
	Lossy bool // drop: always true (the schema must say so)
	Line  int  // line in the schema file, for messages
}

// Op kinds.
const (
	OpRename  = "rename"
	OpDefault = "default"
	OpDrop    = "drop"
)

var (
	groupRE   = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$`)
	nameRE    = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)
	versionRE = regexp.MustCompile(`^v[0-9]+((alpha|beta)[0-9]+)?$`)
	yamlLine  = regexp.MustCompile(`^yaml: line ([0-9]+): `)
)

// schemaError is an ErrBadSchema with its position.
type schemaError struct {
	file string
	line int
	msg  string
}

func (e *schemaError) Error() string {
	return fmt.Sprintf("%s:%d: %s", e.file, e.line, e.msg)
}

func (e *schemaError) Unwrap() error { return ErrBadSchema }

// LoadSchema reads the schema file at path and parses it with ParseSchema.
// A file that cannot be read is an error that does not wrap ErrBadSchema; a
// file over MaxSchemaSize wraps ErrBadSchema.
func LoadSchema(path string) (*Schema, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("versions: load schema: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxSchemaSize+1))
	if err != nil {
		return nil, fmt.Errorf("versions: load schema: %w", err)
	}
	return ParseSchema(path, data)
}

// ParseSchema parses and validates a schema file's contents; name is used
// only in messages and Schema.File. Every error wraps ErrBadSchema and reads
// "NAME:LINE: problem". It is deterministic: the same input always gives an
// equal Schema or the same error.
func ParseSchema(name string, data []byte) (*Schema, error) {
	p := &parser{file: name}
	if len(data) > MaxSchemaSize {
		return nil, p.errAt(1, "schema file is %d bytes, over the limit of %d", len(data), MaxSchemaSize)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, p.errAt(1, "empty schema file")
		}
		return nil, p.yamlErr(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, p.errAt(extra.Line, "more than one YAML document")
	} else if !errors.Is(err, io.EOF) {
		return nil, p.yamlErr(err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, p.errAt(1, "empty schema file")
	}
	if err := p.noAliases(&doc); err != nil {
		return nil, err
	}
	return p.schema(doc.Content[0])
}

type parser struct{ file string }

func (p *parser) errAt(line int, format string, args ...any) error {
	if line < 1 {
		line = 1
	}
	return &schemaError{file: p.file, line: line, msg: fmt.Sprintf(format, args...)}
}

func (p *parser) errf(n *yaml.Node, format string, args ...any) error {
	return p.errAt(n.Line, format, args...)
}

// yamlErr turns a YAML syntax error "yaml: line N: msg" into "FILE:N: msg".
func (p *parser) yamlErr(err error) error {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return p.errAt(line, "%s", strings.TrimPrefix(msg, m[0]))
	}
	return p.errAt(1, "%s", strings.TrimPrefix(msg, "yaml: "))
}

// noAliases rejects aliases and merge keys anywhere in the document, so the
// rest of the parser sees a plain tree.
func (p *parser) noAliases(n *yaml.Node) error {
	if n.Kind == yaml.AliasNode {
		return p.errf(n, "YAML aliases are not supported")
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!merge" {
		return p.errf(n, "YAML merge keys are not supported")
	}
	for _, c := range n.Content {
		if err := p.noAliases(c); err != nil {
			return err
		}
	}
	return nil
}

// fields checks that n is a mapping whose keys are all in allowed, each at
// most once, and returns the values by key.
func (p *parser) fields(n *yaml.Node, what string, allowed ...string) (map[string]*yaml.Node, error) {
	if n.Kind != yaml.MappingNode {
		return nil, p.errf(n, "%s must be a mapping", what)
	}
	out := make(map[string]*yaml.Node, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return nil, p.errf(k, "%s keys must be plain strings", what)
		}
		known := false
		for _, a := range allowed {
			if k.Value == a {
				known = true
				break
			}
		}
		if !known {
			return nil, p.errf(k, "unknown field %q", k.Value)
		}
		if _, dup := out[k.Value]; dup {
			return nil, p.errf(k, "duplicate field %q", k.Value)
		}
		out[k.Value] = v
	}
	return out, nil
}

// str returns the string value of an optional field; absent or null is "".
func (p *parser) str(m map[string]*yaml.Node, key string) (string, int, error) {
	n := m[key]
	if n == nil {
		return "", 0, nil
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return "", n.Line, nil
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		return "", n.Line, p.errf(n, "%s must be a string", key)
	}
	return n.Value, n.Line, nil
}

// boolean returns the value of an optional boolean field; absent is false.
func (p *parser) boolean(m map[string]*yaml.Node, key string) (bool, error) {
	n := m[key]
	if n == nil {
		return false, nil
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
		return false, p.errf(n, "%s must be true or false", key)
	}
	var b bool
	if err := n.Decode(&b); err != nil {
		return false, p.errf(n, "%s must be true or false", key)
	}
	return b, nil
}

// seq returns the items of an optional sequence field; absent or null is nil.
func (p *parser) seq(m map[string]*yaml.Node, key string) ([]*yaml.Node, error) {
	n := m[key]
	if n == nil || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null") {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, p.errf(n, "%s must be a list", key)
	}
	return n.Content, nil
}

func lineOr(line int, n *yaml.Node) int {
	if line > 0 {
		return line
	}
	return n.Line
}

func (p *parser) schema(root *yaml.Node) (*Schema, error) {
	top, err := p.fields(root, "schema file top level", "resources")
	if err != nil {
		return nil, err
	}
	items, err := p.seq(top, "resources")
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, p.errf(root, "schema declares no resources")
	}
	s := &Schema{File: p.file}
	prefixLine := make(map[*Resource]int)
	for _, item := range items {
		r, pl, err := p.resource(item)
		if err != nil {
			return nil, err
		}
		for _, o := range s.Resources {
			if o.Group == r.Group && o.Name == r.Name {
				return nil, p.errf(item, "duplicate resource %s", r.Key())
			}
		}
		for _, o := range s.Resources {
			if strings.HasPrefix(r.Prefix, o.Prefix) || strings.HasPrefix(o.Prefix, r.Prefix) {
				return nil, p.errAt(pl, "prefix %q of %s overlaps prefix %q of %s (line %d)",
					r.Prefix, r.Key(), o.Prefix, o.Key(), prefixLine[o])
			}
			if err := p.keyMigrationOverlaps(r, o, prefixLine[o]); err != nil {
				return nil, err
			}
		}
		prefixLine[r] = pl
		s.Resources = append(s.Resources, r)
	}
	sort.Slice(s.Resources, func(i, j int) bool {
		a, b := s.Resources[i], s.Resources[j]
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		return a.Name < b.Name
	})
	return s, nil
}

// resource parses one resource and returns it with the line of its prefix.
func (p *parser) resource(n *yaml.Node) (*Resource, int, error) {
	m, err := p.fields(n, "resource", "group", "name", "prefix", "preferredVersion", "versions", "conversions",
		"keyMigrations")
	if err != nil {
		return nil, 0, err
	}
	r := &Resource{}
	group, gl, err := p.str(m, "group")
	if err != nil {
		return nil, 0, err
	}
	if group == "" {
		return nil, 0, p.errAt(lineOr(gl, n), "resource has no group")
	}
	if len(group) > 253 || !groupRE.MatchString(group) {
		return nil, 0, p.errAt(gl, "group %q must be lowercase letters, digits, '-' and '.'", group)
	}
	name, nl, err := p.str(m, "name")
	if err != nil {
		return nil, 0, err
	}
	if name == "" {
		return nil, 0, p.errAt(lineOr(nl, n), "resource has no name")
	}
	if len(name) > 63 || !nameRE.MatchString(name) {
		return nil, 0, p.errAt(nl, "name %q must be lowercase letters, digits and '-'", name)
	}
	r.Group, r.Name = group, name
	prefix, pl, err := p.str(m, "prefix")
	if err != nil {
		return nil, 0, err
	}
	pl = lineOr(pl, n)
	if prefix == "" {
		return nil, 0, p.errAt(pl, "resource %s has no prefix", r.Key())
	}
	if !strings.HasPrefix(prefix, "/") || !strings.HasSuffix(prefix, "/") {
		return nil, 0, p.errAt(pl, "prefix %q of %s must start and end with \"/\"", prefix, r.Key())
	}
	r.Prefix = prefix

	vitems, err := p.seq(m, "versions")
	if err != nil {
		return nil, 0, err
	}
	if len(vitems) == 0 {
		return nil, 0, p.errAt(lineOr(0, n), "resource %s declares no versions", r.Key())
	}
	served := false
	for _, vn := range vitems {
		vm, err := p.fields(vn, "version", "name", "served")
		if err != nil {
			return nil, 0, err
		}
		v, vl, err := p.str(vm, "name")
		if err != nil {
			return nil, 0, err
		}
		vl = lineOr(vl, vn)
		if v == "" {
			return nil, 0, p.errAt(vl, "version has no name")
		}
		if !versionRE.MatchString(v) {
			return nil, 0, p.errAt(vl, "version name %q must look like v1, v2beta1 or v3alpha2", v)
		}
		if r.HasVersion(v) {
			return nil, 0, p.errAt(vl, "duplicate version %q", v)
		}
		sv, err := p.boolean(vm, "served")
		if err != nil {
			return nil, 0, err
		}
		served = served || sv
		r.Versions = append(r.Versions, Version{Name: v, Served: sv})
	}
	if !served {
		return nil, 0, p.errf(m["versions"], "resource %s serves no version: mark at least one served: true", r.Key())
	}

	pref, prl, err := p.str(m, "preferredVersion")
	if err != nil {
		return nil, 0, err
	}
	if pref == "" {
		return nil, 0, p.errAt(lineOr(prl, n), "resource %s has no preferredVersion", r.Key())
	}
	if !r.HasVersion(pref) {
		return nil, 0, p.errAt(prl, "preferredVersion %q is not a declared version of %s", pref, r.Key())
	}
	r.Preferred = pref

	if err := p.conversions(r, n, m); err != nil {
		return nil, 0, err
	}
	if err := p.keyMigrations(r, m); err != nil {
		return nil, 0, err
	}
	return r, pl, nil
}

func (p *parser) conversions(r *Resource, rn *yaml.Node, m map[string]*yaml.Node) error {
	citems, err := p.seq(m, "conversions")
	if err != nil {
		return err
	}
	pairs := len(r.Versions) - 1
	convs := make([]Conversion, pairs)
	seen := make([]bool, pairs)
	lines := make([]int, pairs)
	order := make([]int, 0, len(citems)) // pair index of each conversion, as listed
	for _, cn := range citems {
		cm, err := p.fields(cn, "conversion", "from", "to", "ops")
		if err != nil {
			return err
		}
		from, fl, err := p.str(cm, "from")
		if err != nil {
			return err
		}
		to, tl, err := p.str(cm, "to")
		if err != nil {
			return err
		}
		fl, tl = lineOr(fl, cn), lineOr(tl, cn)
		if from == "" || to == "" {
			return p.errf(cn, "conversion needs both from and to")
		}
		fi, ti := r.index(from), r.index(to)
		if fi < 0 {
			return p.errAt(fl, "conversion from %q: not a declared version of %s", from, r.Key())
		}
		if ti < 0 {
			return p.errAt(tl, "conversion to %q: not a declared version of %s", to, r.Key())
		}
		if ti != fi+1 {
			return p.errf(cn, "conversion %s -> %s is not between adjacent versions in declared order", from, to)
		}
		if seen[fi] {
			return p.errf(cn, "duplicate conversion %s -> %s (first at line %d)", from, to, lines[fi])
		}
		ops, err := p.ops(cm)
		if err != nil {
			return err
		}
		seen[fi], lines[fi] = true, cn.Line
		convs[fi] = Conversion{From: from, To: to, Ops: ops}
		order = append(order, fi)
	}
	for i := 0; i < pairs; i++ {
		if !seen[i] {
			line := rn.Line
			if c := m["conversions"]; c != nil {
				line = c.Line
			}
			return p.errAt(line, "resource %s has no conversion %s -> %s",
				r.Key(), r.Versions[i].Name, r.Versions[i+1].Name)
		}
	}
	for k, i := range order {
		if i != k {
			return p.errAt(lines[i], "conversion %s -> %s is out of order: list conversions oldest first",
				convs[i].From, convs[i].To)
		}
	}
	r.Conversions = convs
	return nil
}

func (p *parser) ops(cm map[string]*yaml.Node) ([]FieldOp, error) {
	items, err := p.seq(cm, "ops")
	if err != nil {
		return nil, err
	}
	var ops []FieldOp
	for _, on := range items {
		om, err := p.fields(on, "op", OpRename, OpDefault, OpDrop)
		if err != nil {
			return nil, err
		}
		if len(om) != 1 {
			return nil, p.errf(on, "op must have exactly one of rename, default, drop")
		}
		op := FieldOp{Line: on.Line}
		switch {
		case om[OpRename] != nil:
			op.Kind = OpRename
			am, err := p.fields(om[OpRename], "rename", "from", "to")
			if err != nil {
				return nil, err
			}
			if op.From, err = p.path(am, "from", om[OpRename]); err != nil {
				return nil, err
			}
			if op.To, err = p.path(am, "to", om[OpRename]); err != nil {
				return nil, err
			}
			if overlaps(op.From, op.To) {
				return nil, p.errf(om[OpRename], "rename %s -> %s: the paths overlap", op.From, op.To)
			}
		case om[OpDefault] != nil:
			op.Kind = OpDefault
			am, err := p.fields(om[OpDefault], "default", "field", "value")
			if err != nil {
				return nil, err
			}
			if op.Field, err = p.path(am, "field", om[OpDefault]); err != nil {
				return nil, err
			}
			vn := am["value"]
			if vn == nil {
				return nil, p.errf(om[OpDefault], "default of %s has no value", op.Field)
			}
			if op.Value, err = p.value(vn); err != nil {
				return nil, err
			}
		default:
			op.Kind = OpDrop
			dn := om[OpDrop]
			am, err := p.fields(dn, "drop", "field", "lossy")
			if err != nil {
				return nil, err
			}
			if op.Field, err = p.path(am, "field", dn); err != nil {
				return nil, err
			}
			if op.Lossy, err = p.boolean(am, "lossy"); err != nil {
				return nil, err
			}
			if !op.Lossy {
				return nil, p.errf(dn, "drop of %s loses data: mark it lossy: true", op.Field)
			}
		}
		ops = append(ops, op)
	}
	return ops, nil
}

// path reads and checks a dotted field path.
func (p *parser) path(m map[string]*yaml.Node, key string, parent *yaml.Node) (string, error) {
	s, line, err := p.str(m, key)
	if err != nil {
		return "", err
	}
	line = lineOr(line, parent)
	if s == "" {
		return "", p.errAt(line, "%s: empty path", key)
	}
	segs := strings.Split(s, ".")
	for _, seg := range segs {
		if seg == "" {
			return "", p.errAt(line, "%s: path %q has an empty segment", key, s)
		}
	}
	if segs[0] == "apiVersion" || segs[0] == "metadata" {
		return "", p.errAt(line, "%s: path %q may not touch %s", key, s, segs[0])
	}
	return s, nil
}

// overlaps reports whether one path is the other or an ancestor of it.
func overlaps(a, b string) bool {
	return a == b || strings.HasPrefix(a, b+".") || strings.HasPrefix(b, a+".")
}

// value converts a YAML node into a JSON value.
func (p *parser) value(n *yaml.Node) (any, error) {
	switch n.Kind {
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode {
				return nil, p.errf(k, "object keys in values must be strings")
			}
			if _, dup := out[k.Value]; dup {
				return nil, p.errf(k, "duplicate key %q", k.Value)
			}
			v, err := p.value(n.Content[i+1])
			if err != nil {
				return nil, err
			}
			out[k.Value] = v
		}
		return out, nil
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := p.value(c)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case yaml.ScalarNode:
		switch tag := n.ShortTag(); tag {
		case "!!null":
			return nil, nil
		case "!!str", "!!timestamp", "!!binary":
			return n.Value, nil
		case "!!bool":
			var b bool
			if err := n.Decode(&b); err != nil {
				return nil, p.errf(n, "bad boolean %q", n.Value)
			}
			return b, nil
		case "!!int", "!!float":
			var f float64
			if err := n.Decode(&f); err != nil {
				return nil, p.errf(n, "bad number %q", n.Value)
			}
			if f != f || f > 1.7976931348623157e308 || f < -1.7976931348623157e308 {
				return nil, p.errf(n, "number %q is not representable in JSON", n.Value)
			}
			return f, nil
		default:
			return nil, p.errf(n, "unsupported YAML tag %s", tag)
		}
	}
	return nil, p.errf(n, "unsupported YAML value")
}

// Lookup returns the resource group/resource, or nil if there is none.
func (s *Schema) Lookup(group, resource string) *Resource {
	if s == nil {
		return nil
	}
	for _, r := range s.Resources {
		if r.Group == group && r.Name == resource {
			return r
		}
	}
	return nil
}

// ByPrefix returns the resource whose Prefix is a prefix of key, or nil if
// none is. Prefixes never overlap, so at most one resource matches.
func (s *Schema) ByPrefix(key string) *Resource {
	if s == nil {
		return nil
	}
	for _, r := range s.Resources {
		if strings.HasPrefix(key, r.Prefix) {
			return r
		}
	}
	return nil
}

// Key returns "group/name", e.g. "apps/widgets".
func (r *Resource) Key() string { return r.Group + "/" + r.Name }

// Decodable returns every declared version name, oldest first: the versions
// an object may be stored in and still be read.
func (r *Resource) Decodable() []string {
	out := make([]string, 0, len(r.Versions))
	for _, v := range r.Versions {
		out = append(out, v.Name)
	}
	return out
}

// Served returns the served version names, oldest first.
func (r *Resource) Served() []string {
	var out []string
	for _, v := range r.Versions {
		if v.Served {
			out = append(out, v.Name)
		}
	}
	return out
}

// HasVersion reports whether v is a declared version.
func (r *Resource) HasVersion(v string) bool { return r.index(v) >= 0 }

// Newer reports whether version a is declared later than version b. It is
// false if either is not declared.
func (r *Resource) Newer(a, b string) bool {
	ai, bi := r.index(a), r.index(b)
	return ai >= 0 && bi >= 0 && ai > bi
}

func (r *Resource) index(v string) int {
	for i, d := range r.Versions {
		if d.Name == v {
			return i
		}
	}
	return -1
}
