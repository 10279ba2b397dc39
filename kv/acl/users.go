package acl

import (
	"errors"
	"iter"
	"slices"
	"unicode/utf8"

	"golang.org/x/crypto/bcrypt"

	"github.com/keel-kv/keel/kv/api"
)

// Users and roles: etcd's auth API (kv/etcdv3) on this engine. There is no second
// permission system; an etcd role is a policy, an etcd user a record that names its
// roles, and what a user may do is decided by the Authorizer of its roles' policies:
//
//	etcd                                  keel record
//	role R                                policy R (\x00keel/acl/policies/R)
//	role R's permission [key, end) T      a key rule of policy R: {key, end, access}
//	  (READ, WRITE, READWRITE)              (read, write-only, write: below)
//	role root                             policy "root" with every right
//	                                      (ManagementPolicy's rules under the name root)
//	user U with password and roles        UserRecord (\x00keel/acl/users/U): bcrypt hash
//	                                      (cost 10), no_password, roles
//	Authenticate(U, password)             a token record bound to U (TokenRecord.User),
//	                                      whose rights are U's roles' policies at each
//	                                      check; deleted with U or on a password change
//	auth enable / disable                 the bootstrap record (created, or Disabled)
//
// Access. keel's key rules are read or write, and write includes read; etcd's are
// READ, WRITE and READWRITE, and etcd's WRITE grants no read. A READ permission is a
// read rule, a READWRITE one a write rule, and a WRITE one a rule of access
// "write-only" (api.AccessWriteOnly), which grants writes and no read. A permission's
// range is stored as etcd states it (key, range end; api.ACLKeyRule), so role get
// answers it unchanged.
//
// The root user and role are etcd's: the role root grants every right whatever its
// policy holds (a user may be granted root before the role exists, as on etcd), auth
// enable needs a user root holding the role root, and while ACLs are enforced the root
// user cannot be deleted or lose the root role, and the root role cannot be deleted.

// The root user and role (etcd's rootUser, rootRole).
const (
	RootUser = "root"
	RootRole = "root"
)

// BcryptCost is the cost of stored password hashes: etcd's default (bcrypt.DefaultCost).
const BcryptCost = bcrypt.DefaultCost

// UserRecord is the stored form of a user.
type UserRecord struct {
	Name string `json:"name"`
	// PasswordHash is the bcrypt hash of the password ("" for a NoPassword user).
	PasswordHash string   `json:"password_hash,omitempty"`
	NoPassword   bool     `json:"no_password,omitempty"`
	Roles        []string `json:"roles,omitempty"` // sorted, as etcd keeps them
	// Revision is the record's mod revision (set by Load; not stored).
	Revision int64 `json:"-"`
}

// HasRole reports whether the user holds role.
func (u UserRecord) HasRole(role string) bool { return slices.Contains(u.Roles, role) }

// ErrBadUserName: a user name that is not UTF-8 (every keel key is).
var ErrBadUserName = errors.New("a user or role name must be valid UTF-8")

// CheckUserName refuses a user name no record can hold.
func CheckUserName(name string) error {
	if !utf8.ValidString(name) {
		return ErrBadUserName
	}
	return nil
}

// HashPassword is the stored hash of password: bcrypt at BcryptCost.
func HashPassword(password string) (string, error) {
	h, err := bcrypt.GenerateFromPassword([]byte(password), BcryptCost)
	return string(h), err
}

// CheckPassword reports whether password matches the user's stored hash; a
// NoPassword user matches no password.
func (u UserRecord) CheckPassword(password string) bool {
	if u.NoPassword || u.PasswordHash == "" {
		return false
	}
	return bcrypt.CompareHashAndPassword([]byte(u.PasswordHash), []byte(password)) == nil
}

// RootPolicy is the policy of the role root: every right.
func RootPolicy() api.ACLPolicy {
	p := ManagementPolicy()
	p.Name, p.Description = RootRole, "etcd's root role: every right"
	return p
}

// User returns the stored user name.
func (st *State) User(name string) (UserRecord, bool) {
	u, ok := st.users[name]
	return u, ok
}

// Users yields every stored user, in no particular order.
func (st *State) Users() iter.Seq[UserRecord] {
	return func(yield func(UserRecord) bool) {
		for _, u := range st.users {
			if !yield(u) {
				return
			}
		}
	}
}

// RolePolicies returns the policies of roles: each role's policy, and every right for
// the role root whatever its policy holds (a missing role grants nothing).
func (st *State) RolePolicies(roles []string) []api.ACLPolicy {
	out := make([]api.ACLPolicy, 0, len(roles))
	for _, r := range roles {
		if r == RootRole {
			out = append(out, RootPolicy())
		} else if p, ok := st.policies[r]; ok {
			out = append(out, p)
		}
	}
	return out
}

// UserTokens yields the tokens issued to user.
func (st *State) UserTokens(user string) iter.Seq2[SecretHash, *Token] {
	return func(yield func(SecretHash, *Token) bool) {
		for h, t := range st.tokens {
			if t.rec.User == user && !yield(h, t) {
				return
			}
		}
	}
}
