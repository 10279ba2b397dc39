package kv

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/acl"
	"github.com/keel-kv/keel/kv/api"
)

// Users and roles: etcd's auth API, kept by the ACL engine (kv/acl/users.go states the
// mapping: a role is a policy, a user a record naming its roles, a user's token a
// token record linked to the user). The rules are etcd's (server/auth/store.go), each
// refusal a sentinel below that the etcd door answers with etcd's own error. Every
// method but UserAuthenticate, UserGet (a user reads itself) and RoleGet (a user reads
// its roles) needs the acl right, as etcd's need the root role; none needs a right
// while ACLs are not enforced. Granting rights (a permission, a role) also needs every
// right granted (checkGrant), as keel's token and policy routes do.

// Refusals of the users and roles API (etcd's auth errors).
var (
	ErrUserEmpty            = errors.New("kv: user name is empty")
	ErrUserExists           = errors.New("kv: user name already exists")
	ErrUserNotFound         = errors.New("kv: user name not found")
	ErrRoleEmpty            = errors.New("kv: role name is empty")
	ErrRoleExists           = errors.New("kv: role name already exists")
	ErrRoleNotFound         = errors.New("kv: role name not found")
	ErrRoleNotGranted       = errors.New("kv: role is not granted to the user")
	ErrPermissionNotGranted = errors.New("kv: permission is not granted to the role")
	ErrRootUserNotExist     = errors.New("kv: root user does not exist")
	ErrRootRoleNotExist     = errors.New("kv: root user does not have root role")
	ErrAuthNotEnabled       = errors.New("kv: authentication is not enabled")
	ErrAuthFailed           = errors.New("kv: authentication failed, invalid user ID or password")
	// ErrInvalidAuthMgmt: a change etcd forbids while auth is enabled (deleting the
	// root user or role, revoking root from root), a permission range that is not one,
	// or auth disable on a node whose ACL default is deny.
	ErrInvalidAuthMgmt = errors.New("kv: invalid auth management")
	// ErrNoToken: ACLs are enforced and the request carries no token at all (an
	// ErrUnauthorized; etcd's "user name is empty").
	ErrNoToken = acl.ErrNoToken
)

// UserTokenTTL is how long a token UserAuthenticate issues works. etcd clients
// authenticate again when a token is refused (clientv3 retries with a new one).
const UserTokenTTL = 10 * time.Minute

// aclView returns the ACL state read at the leader, for a change that builds on it.
func (s *Server) aclView(ctx context.Context) (*acl.State, error) {
	st, err := s.reloadACL(ctx, fsm.Linearizable)
	if err != nil {
		return nil, fmt.Errorf("acl state: %w", err)
	}
	return st, nil
}

// applyAuth replicates an ACL change guarded by cmps; a failed guard (a record changed
// meanwhile) is ErrConflict.
func (s *Server) applyAuth(ctx context.Context, what string, cmps []fsm.Compare, ops ...fsm.Op) error {
	ok, err := s.applyACL(ctx, &fsm.Txn{Compares: cmps, Success: ops})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if !ok {
		return fmt.Errorf("%s: %w: an ACL record changed meanwhile; try again", what, ErrConflict)
	}
	return nil
}

func userKey(name string) []byte   { return []byte(acl.UsersPrefix + name) }
func policyKey(name string) []byte { return []byte(acl.PoliciesPrefix + name) }

// unchanged guards a record at the mod revision it was read at (0: absent).
func unchanged(key []byte, rev int64) fsm.Compare {
	return fsm.Compare{Key: key, Target: fsm.TargetModRevision, Result: fsm.CompareEqual, Int: rev}
}

func putUser(u acl.UserRecord) fsm.Op {
	return fsm.Op{Type: fsm.OpPut, Key: userKey(u.Name), Value: mustJSON(u)}
}

// dropUserTokens deletes the tokens issued to user (a password change or the user's
// deletion ends them, as etcd's invalidateUser does).
func dropUserTokens(st *acl.State, user string) []fsm.Op {
	var ops []fsm.Op
	for h := range st.UserTokens(user) {
		ops = append(ops, fsm.Op{Type: fsm.OpDelete, Key: []byte(acl.TokensPrefix + h.String())})
	}
	return ops
}

// checkRoleName refuses a role name no policy can have.
func checkRoleName(name string) error {
	if name == "" {
		return ErrRoleEmpty
	}
	if err := acl.ValidatePolicy(api.ACLPolicy{Name: name}); err != nil {
		return fmt.Errorf("%w: role %w", ErrInvalidBody, err)
	}
	return nil
}

// UserAdd creates user name with password (bcrypt, acl.BcryptCost), or with no
// password: such a user cannot authenticate (etcd's NoPassword option; it is for
// client-certificate identities).
func (s *Server) UserAdd(ctx context.Context, c Caller, name, password string, noPassword bool) error {
	if err := s.CheckACLManagement(c); err != nil {
		return err
	}
	if name == "" {
		return ErrUserEmpty
	}
	if err := acl.CheckUserName(name); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidBody, err)
	}
	st, err := s.aclView(ctx)
	if err != nil {
		return err
	}
	if _, ok := st.User(name); ok {
		return ErrUserExists
	}
	u := acl.UserRecord{Name: name, NoPassword: noPassword}
	if !noPassword {
		if u.PasswordHash, err = acl.HashPassword(password); err != nil {
			return fmt.Errorf("user add: %w: %w", ErrInvalidBody, err)
		}
	}
	if err := s.applyAuth(ctx, "user add", []fsm.Compare{unchanged(userKey(name), 0)}, putUser(u)); err != nil {
		return err
	}
	s.log.Info("acl: user added", "user", name)
	return nil
}

// userFor reads user name for a change: the state and the record.
func (s *Server) userFor(ctx context.Context, name string) (*acl.State, acl.UserRecord, error) {
	st, err := s.aclView(ctx)
	if err != nil {
		return nil, acl.UserRecord{}, err
	}
	u, ok := st.User(name)
	if !ok {
		return nil, acl.UserRecord{}, ErrUserNotFound
	}
	return st, u, nil
}

// UserDelete deletes user name and the tokens issued to it. While ACLs are enforced
// the root user cannot be deleted (ErrInvalidAuthMgmt).
func (s *Server) UserDelete(ctx context.Context, c Caller, name string) error {
	if err := s.CheckACLManagement(c); err != nil {
		return err
	}
	ctx = c.context(ctx)
	if err := s.rootRule(ctx, name == acl.RootUser); err != nil {
		return err
	}
	st, u, err := s.userFor(ctx, name)
	if err != nil {
		return err
	}
	if err := checkGrant(ctx, "delete the user", st.RolePolicies(u.Roles)...); err != nil {
		return fmt.Errorf("user delete: %w", err)
	}
	ops := append([]fsm.Op{{Type: fsm.OpDelete, Key: userKey(name)}}, dropUserTokens(st, name)...)
	if err := s.applyAuth(ctx, "user delete", []fsm.Compare{unchanged(userKey(name), u.Revision), enforcedAt(st)}, ops...); err != nil {
		return err
	}
	s.log.Info("acl: user deleted", "user", name)
	return nil
}

// rootRule refuses (ErrInvalidAuthMgmt) a change to root that etcd forbids while auth
// is enabled (root is true for one), before anything else is checked, as etcd does.
// The change's transaction guards the bootstrap record (enforcedAt), so an auth
// enable meanwhile fails it.
func (s *Server) rootRule(ctx context.Context, root bool) error {
	if !root {
		return nil
	}
	st, err := s.aclView(ctx)
	if err != nil {
		return err
	}
	if st.Enforced() {
		return ErrInvalidAuthMgmt
	}
	return nil
}

// enforcedAt guards a change whose rule depends on whether ACLs are enforced: the
// bootstrap record is as st read it.
func enforcedAt(st *acl.State) fsm.Compare {
	_, rev := st.Bootstrap()
	return unchanged([]byte(acl.BootstrapKey), rev)
}

// UserChangePassword sets user name's password (a NoPassword user keeps none) and ends
// the tokens issued to it.
func (s *Server) UserChangePassword(ctx context.Context, c Caller, name, password string) error {
	if err := s.CheckACLManagement(c); err != nil {
		return err
	}
	ctx = c.context(ctx)
	st, u, err := s.userFor(ctx, name)
	if err != nil {
		return err
	}
	if err := checkGrant(ctx, "change the user's password", st.RolePolicies(u.Roles)...); err != nil {
		return fmt.Errorf("user passwd: %w", err)
	}
	if !u.NoPassword {
		if u.PasswordHash, err = acl.HashPassword(password); err != nil {
			return fmt.Errorf("user passwd: %w: %w", ErrInvalidBody, err)
		}
	}
	ops := append([]fsm.Op{putUser(u)}, dropUserTokens(st, name)...)
	if err := s.applyAuth(ctx, "user passwd", []fsm.Compare{unchanged(userKey(name), u.Revision)}, ops...); err != nil {
		return err
	}
	s.log.Info("acl: user password changed", "user", name)
	return nil
}

// UserGrantRole grants role to user (granting it twice is no change). The role must
// exist, but for root (etcd grants root before the role exists); the caller must hold
// every right of the role.
func (s *Server) UserGrantRole(ctx context.Context, c Caller, user, role string) error {
	if err := s.CheckACLManagement(c); err != nil {
		return err
	}
	ctx = c.context(ctx)
	st, u, err := s.userFor(ctx, user)
	if err != nil {
		return err
	}
	cmps := []fsm.Compare{unchanged(userKey(user), u.Revision)}
	if role != acl.RootRole {
		p, ok := st.Policy(role)
		if !ok {
			return ErrRoleNotFound
		}
		cmps = append(cmps, unchanged(policyKey(role), p.Revision))
	}
	if err := checkGrant(ctx, "grant the role", st.RolePolicies([]string{role})...); err != nil {
		return fmt.Errorf("user grant-role: %w", err)
	}
	if u.HasRole(role) {
		return nil
	}
	u.Roles = append(u.Roles, role)
	slices.Sort(u.Roles)
	if err := s.applyAuth(ctx, "user grant-role", cmps, putUser(u)); err != nil {
		return err
	}
	s.log.Info("acl: role granted", "user", user, "role", role)
	return nil
}

// UserRevokeRole takes role from user; tokens already issued to the user lose its
// rights at once. While ACLs are enforced root keeps the role root.
func (s *Server) UserRevokeRole(ctx context.Context, c Caller, user, role string) error {
	if err := s.CheckACLManagement(c); err != nil {
		return err
	}
	ctx = c.context(ctx)
	if err := s.rootRule(ctx, user == acl.RootUser && role == acl.RootRole); err != nil {
		return err
	}
	st, u, err := s.userFor(ctx, user)
	if err != nil {
		return err
	}
	if !u.HasRole(role) {
		return ErrRoleNotGranted
	}
	if err := checkGrant(ctx, "revoke the role", st.RolePolicies([]string{role})...); err != nil {
		return fmt.Errorf("user revoke-role: %w", err)
	}
	u.Roles = slices.DeleteFunc(u.Roles, func(r string) bool { return r == role })
	cmps := []fsm.Compare{unchanged(userKey(user), u.Revision), enforcedAt(st)}
	if err := s.applyAuth(ctx, "user revoke-role", cmps, putUser(u)); err != nil {
		return err
	}
	s.log.Info("acl: role revoked", "user", user, "role", role)
	return nil
}

// UserGet is user name's roles. A caller without the acl right may read only its own
// user.
func (s *Server) UserGet(ctx context.Context, c Caller, name string) ([]string, error) {
	if err := s.CheckACLManagement(c); err != nil && c.az.User() != name {
		return nil, err
	}
	_, u, err := s.userFor(ctx, name)
	if err != nil {
		return nil, err
	}
	return slices.Clone(u.Roles), nil
}

// UserList is every user's name, sorted.
func (s *Server) UserList(ctx context.Context, c Caller) ([]string, error) {
	if err := s.CheckACLManagement(c); err != nil {
		return nil, err
	}
	st, err := s.aclView(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for u := range st.Users() {
		out = append(out, u.Name)
	}
	slices.Sort(out)
	return out, nil
}

// RoleAdd creates role name: an empty policy, or for root a policy of every right
// (acl.RootPolicy).
func (s *Server) RoleAdd(ctx context.Context, c Caller, name string) error {
	if err := s.CheckACLManagement(c); err != nil {
		return err
	}
	ctx = c.context(ctx)
	if err := checkRoleName(name); err != nil {
		return err
	}
	st, err := s.aclView(ctx)
	if err != nil {
		return err
	}
	if _, ok := st.Policy(name); ok {
		return ErrRoleExists
	}
	p := api.ACLPolicy{Name: name, Description: "etcd role"}
	if name == acl.RootRole {
		p = acl.RootPolicy()
	}
	if err := checkGrant(ctx, "create the role", p); err != nil {
		return fmt.Errorf("role add: %w", err)
	}
	if err := s.applyAuth(ctx, "role add", []fsm.Compare{unchanged(policyKey(name), 0)},
		fsm.Op{Type: fsm.OpPut, Key: policyKey(name), Value: mustJSON(p)}); err != nil {
		return err
	}
	s.log.Info("acl: role added", "role", name)
	return nil
}

// RoleGet is role name's policy. A caller without the acl right may read only a role
// its user holds.
func (s *Server) RoleGet(ctx context.Context, c Caller, name string) (api.ACLPolicy, error) {
	st, err := s.aclView(ctx)
	if err != nil {
		return api.ACLPolicy{}, err
	}
	if err := s.CheckACLManagement(c); err != nil {
		if u, ok := st.User(c.az.User()); !ok || !u.HasRole(name) {
			return api.ACLPolicy{}, err
		}
	}
	p, ok := st.Policy(name)
	if !ok {
		return api.ACLPolicy{}, ErrRoleNotFound
	}
	return p, nil
}

// RoleList is every role's (policy's) name, sorted.
func (s *Server) RoleList(ctx context.Context, c Caller) ([]string, error) {
	if err := s.CheckACLManagement(c); err != nil {
		return nil, err
	}
	st, err := s.aclView(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for p := range st.Policies() {
		out = append(out, p.Name)
	}
	slices.Sort(out)
	return out, nil
}

// RoleDelete deletes role name and takes it from every user. While ACLs are enforced
// the role root cannot be deleted (ErrInvalidAuthMgmt); the built-in management policy
// never can.
func (s *Server) RoleDelete(ctx context.Context, c Caller, name string) error {
	if err := s.CheckACLManagement(c); err != nil {
		return err
	}
	ctx = c.context(ctx)
	st, err := s.aclView(ctx)
	if err != nil {
		return err
	}
	if st.Enforced() && name == acl.RootRole {
		return ErrInvalidAuthMgmt // etcd: the root role stays while auth is enabled
	}
	p, ok := st.Policy(name)
	if !ok {
		return ErrRoleNotFound
	}
	if err := checkPolicyWritable(name); err != nil {
		return err
	}
	if err := checkGrant(ctx, "delete the role", p); err != nil {
		return fmt.Errorf("role delete: %w", err)
	}
	cmps := []fsm.Compare{unchanged(policyKey(name), p.Revision), enforcedAt(st)}
	ops := []fsm.Op{{Type: fsm.OpDelete, Key: policyKey(name)}}
	for u := range st.Users() {
		if u.HasRole(name) {
			cmps = append(cmps, unchanged(userKey(u.Name), u.Revision))
			u.Roles = slices.DeleteFunc(slices.Clone(u.Roles), func(r string) bool { return r == name })
			ops = append(ops, putUser(u))
		}
	}
	if err := s.applyAuth(ctx, "role delete", cmps, ops...); err != nil {
		return err
	}
	s.log.Info("acl: role deleted", "role", name)
	return nil
}

// RoleGrantPermission grants role the key rule k (a key range, api.ACLKeyRule): a rule
// on the same range replaces its access, as etcd updates a permission. A range that is
// not one (etcd's isValidPermissionRange) is ErrInvalidAuthMgmt.
func (s *Server) RoleGrantPermission(ctx context.Context, c Caller, role string, k api.ACLKeyRule) error {
	if err := s.CheckACLManagement(c); err != nil {
		return err
	}
	ctx = c.context(ctx)
	if k.Key == "" || k.Prefix != "" || (k.End != "" && k.End != api.ACLFromKey && k.End <= k.Key) {
		return ErrInvalidAuthMgmt
	}
	st, err := s.aclView(ctx)
	if err != nil {
		return err
	}
	p, ok := st.Policy(role)
	if !ok {
		return ErrRoleNotFound
	}
	if err := checkPolicyWritable(role); err != nil {
		return err
	}
	rev := p.Revision
	p.Keys = slices.Clone(p.Keys)
	if i := slices.IndexFunc(p.Keys, func(r api.ACLKeyRule) bool { return r.Key == k.Key && r.End == k.End }); i >= 0 {
		p.Keys[i].Access = k.Access
	} else {
		p.Keys = append(p.Keys, k)
		slices.SortStableFunc(p.Keys, func(a, b api.ACLKeyRule) int { return strings.Compare(a.Key, b.Key) })
	}
	return s.rolePut(ctx, "role grant-permission", p, rev)
}

// rolePut stores role p, read at revision rev, after the checks every policy write
// has (validatePolicy, checkGrant on the old and the new rules).
func (s *Server) rolePut(ctx context.Context, what string, p api.ACLPolicy, rev int64) error {
	if err := validatePolicy(p); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := s.checkPolicyChange(ctx, "change the role", &p); err != nil {
		return err
	}
	p.Revision = 0
	if err := s.applyAuth(ctx, what, []fsm.Compare{unchanged(policyKey(p.Name), rev)},
		fsm.Op{Type: fsm.OpPut, Key: policyKey(p.Name), Value: mustJSON(p)}); err != nil {
		return err
	}
	s.log.Info("acl: role changed", "role", p.Name)
	return nil
}

// RoleRevokePermission takes from role the rule on exactly [key, end) (etcd's
// permission of that key and range end); none is ErrPermissionNotGranted.
func (s *Server) RoleRevokePermission(ctx context.Context, c Caller, role, key, end string) error {
	if err := s.CheckACLManagement(c); err != nil {
		return err
	}
	ctx = c.context(ctx)
	st, err := s.aclView(ctx)
	if err != nil {
		return err
	}
	p, ok := st.Policy(role)
	if !ok {
		return ErrRoleNotFound
	}
	rev, n := p.Revision, len(p.Keys)
	p.Keys = slices.DeleteFunc(slices.Clone(p.Keys), func(r api.ACLKeyRule) bool { return r.Key == key && r.End == end })
	if len(p.Keys) == n {
		return ErrPermissionNotGranted
	}
	if err := checkPolicyWritable(role); err != nil {
		return err
	}
	return s.rolePut(ctx, "role revoke-permission", p, rev)
}

// AuthEnable starts enforcing ACLs (etcd's auth enable): it needs a user root holding
// the role root (ErrRootUserNotExist, ErrRootRoleNotExist). On a cluster never
// bootstrapped it writes the bootstrap record (no management token is minted: the
// root user authenticates instead); on one paused by AuthDisable it resumes. Enabled
// already is no change.
func (s *Server) AuthEnable(ctx context.Context, c Caller) error {
	if err := s.CheckACLManagement(c); err != nil {
		return err
	}
	st, err := s.aclView(ctx)
	if err != nil {
		return err
	}
	if st.Enforced() {
		return nil
	}
	root, ok := st.User(acl.RootUser)
	if !ok {
		return ErrRootUserNotExist
	}
	if !root.HasRole(acl.RootRole) {
		return ErrRootRoleNotExist
	}
	boot, rev := st.Bootstrap()
	if rev == 0 {
		boot = acl.BootstrapRecord{AccessorID: "etcd user " + acl.RootUser, Time: time.Now().UTC().Format(time.RFC3339)}
	}
	boot.Disabled = false
	cmps := []fsm.Compare{unchanged([]byte(acl.BootstrapKey), rev), unchanged(userKey(acl.RootUser), root.Revision)}
	if err := s.applyAuth(ctx, "auth enable", cmps,
		fsm.Op{Type: fsm.OpPut, Key: []byte(acl.BootstrapKey), Value: mustJSON(boot)}); err != nil {
		return err
	}
	s.log.Info("acl: enforcement enabled (etcd auth enable)")
	return nil
}

// AuthDisable pauses enforcement (etcd's auth disable): the bootstrap record says
// Disabled, and every node's -acl-default decides, as before a bootstrap. A node
// whose default is deny refuses (ErrInvalidAuthMgmt): paused, it would refuse every
// request, auth enable included. Not enforced already is no change.
func (s *Server) AuthDisable(ctx context.Context, c Caller) error {
	if err := s.CheckACLManagement(c); err != nil {
		return err
	}
	st, err := s.aclView(ctx)
	if err != nil {
		return err
	}
	if !st.Enforced() {
		return nil
	}
	if s.cfg.ACLDefault == ACLDeny {
		return fmt.Errorf("%w: this node's ACL default is deny: disabled, the cluster would refuse every request",
			ErrInvalidAuthMgmt)
	}
	boot, rev := st.Bootstrap()
	boot.Disabled = true
	if err := s.applyAuth(ctx, "auth disable", []fsm.Compare{unchanged([]byte(acl.BootstrapKey), rev)},
		fsm.Op{Type: fsm.OpPut, Key: []byte(acl.BootstrapKey), Value: mustJSON(boot)}); err != nil {
		return err
	}
	s.log.Info("acl: enforcement disabled (etcd auth disable)")
	return nil
}

// UserAuthenticate checks user name's password and issues a token bound to the user
// (acl.TokenRecord.User) that works for UserTokenTTL, with its secret: a keel token
// every door accepts, whose rights are the user's roles' at each check. It also
// deletes the user's expired tokens. ErrAuthNotEnabled while ACLs are not enforced;
// ErrAuthFailed for an unknown user, a wrong password or a user without one.
func (s *Server) UserAuthenticate(ctx context.Context, name, password string) (api.ACLToken, error) {
	st, err := s.aclView(ctx)
	if err != nil {
		return api.ACLToken{}, err
	}
	if !st.Enforced() {
		return api.ACLToken{}, ErrAuthNotEnabled
	}
	u, ok := st.User(name)
	if !ok || !u.CheckPassword(password) {
		return api.ACLToken{}, ErrAuthFailed
	}
	rec, hash, out, err := newToken("etcd user "+name, []string{}, UserTokenTTL)
	if err != nil {
		return api.ACLToken{}, err
	}
	rec.User, out.User = name, name
	ops := []fsm.Op{{Type: fsm.OpPut, Key: []byte(acl.TokensPrefix + hash.String()), Value: mustJSON(rec)}}
	now := time.Now()
	for h, t := range st.UserTokens(name) {
		if t.Expired(now) {
			ops = append(ops, fsm.Op{Type: fsm.OpDelete, Key: []byte(acl.TokensPrefix + h.String())})
		}
	}
	// The password checked is still the user's when the token is stored.
	if err := s.applyAuth(ctx, "authenticate", []fsm.Compare{unchanged(userKey(name), u.Revision)}, ops...); err != nil {
		return api.ACLToken{}, err
	}
	return out, nil
}
