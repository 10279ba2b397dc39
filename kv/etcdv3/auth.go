package etcdv3

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
)

// etcdAuth serves etcd's Auth service: users, roles and their permissions, auth
// enable, disable and status, and Authenticate. It translates; the rules are the
// core's (kv/core_users.go) and the records the ACL engine's (kv/acl/users.go: a role
// is a keel policy, a user a record naming its roles, an authenticated user's token a
// keel token every door accepts). Authenticate also takes the user "keel" with a keel
// token's secret as its password (when no etcd user is called keel), answering that
// secret as the token.
type etcdAuth struct {
	pb.UnimplementedAuthServer
	e *Server
}

// AuthUser is the user name Authenticate takes with a keel token's secret as password.
const AuthUser = "keel"

// Authenticate checks an etcd user's password and answers a token bound to the user.
func (a etcdAuth) Authenticate(ctx context.Context, r *pb.AuthenticateRequest) (*pb.AuthenticateResponse, error) {
	tok, err := a.e.core.UserAuthenticate(ctx, r.Name, r.Password)
	if errors.Is(err, kv.ErrAuthFailed) && r.Name == AuthUser {
		return a.keelToken(ctx, r)
	}
	if err != nil {
		return nil, err
	}
	return &pb.AuthenticateResponse{Header: a.e.header(a.e.revision(ctx)), Token: tok.SecretID}, nil
}

// keelToken authenticates the user "keel" whose password is a keel token's secret.
func (a etcdAuth) keelToken(ctx context.Context, r *pb.AuthenticateRequest) (*pb.AuthenticateResponse, error) {
	if r.Password == "" {
		return nil, fmt.Errorf("%w: user %q: the user is %q, the password a keel ACL token", errEtcdAuthFailed, r.Name, AuthUser)
	}
	c, err := a.e.core.Authenticate(ctx, r.Password)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: %v", errEtcdAuthFailed, err)
	case !c.Enforced():
		return nil, errEtcdAuthNotEnabled
	}
	return &pb.AuthenticateResponse{Header: a.e.header(a.e.revision(ctx)), Token: r.Password}, nil
}

// AuthStatus says whether ACLs are enforced.
func (a etcdAuth) AuthStatus(ctx context.Context, _ *pb.AuthStatusRequest) (*pb.AuthStatusResponse, error) {
	enabled, err := a.e.core.ACLsEnabled(ctx)
	if err != nil {
		return nil, err
	}
	return &pb.AuthStatusResponse{Header: a.e.header(a.e.revision(ctx)), Enabled: enabled}, nil
}

func (a etcdAuth) hdr(ctx context.Context) *pb.ResponseHeader { return a.e.header(a.e.revision(ctx)) }

func (a etcdAuth) AuthEnable(ctx context.Context, _ *pb.AuthEnableRequest) (*pb.AuthEnableResponse, error) {
	if err := a.e.core.AuthEnable(ctx, callerOf(ctx)); err != nil {
		return nil, err
	}
	return &pb.AuthEnableResponse{Header: a.hdr(ctx)}, nil
}

func (a etcdAuth) AuthDisable(ctx context.Context, _ *pb.AuthDisableRequest) (*pb.AuthDisableResponse, error) {
	if err := a.e.core.AuthDisable(ctx, callerOf(ctx)); err != nil {
		return nil, err
	}
	return &pb.AuthDisableResponse{Header: a.hdr(ctx)}, nil
}

// UserAdd: etcd sends the password in clear (etcdctl) or already hashed
// (hashed_password, base64 of a bcrypt hash); keel hashes a clear one itself and
// refuses a hashed one.
func (a etcdAuth) UserAdd(ctx context.Context, r *pb.AuthUserAddRequest) (*pb.AuthUserAddResponse, error) {
	if r.HashedPassword != "" {
		return nil, etcdUnsupported("user add with a hashed password: send the password")
	}
	noPassword := r.Options != nil && r.Options.NoPassword
	if err := a.e.core.UserAdd(ctx, callerOf(ctx), r.Name, r.Password, noPassword); err != nil {
		return nil, err
	}
	return &pb.AuthUserAddResponse{Header: a.hdr(ctx)}, nil
}

func (a etcdAuth) UserDelete(ctx context.Context, r *pb.AuthUserDeleteRequest) (*pb.AuthUserDeleteResponse, error) {
	if err := a.e.core.UserDelete(ctx, callerOf(ctx), r.Name); err != nil {
		return nil, err
	}
	return &pb.AuthUserDeleteResponse{Header: a.hdr(ctx)}, nil
}

func (a etcdAuth) UserChangePassword(ctx context.Context, r *pb.AuthUserChangePasswordRequest) (*pb.AuthUserChangePasswordResponse, error) {
	if r.HashedPassword != "" {
		return nil, etcdUnsupported("user passwd with a hashed password: send the password")
	}
	if err := a.e.core.UserChangePassword(ctx, callerOf(ctx), r.Name, r.Password); err != nil {
		return nil, err
	}
	return &pb.AuthUserChangePasswordResponse{Header: a.hdr(ctx)}, nil
}

func (a etcdAuth) UserGrantRole(ctx context.Context, r *pb.AuthUserGrantRoleRequest) (*pb.AuthUserGrantRoleResponse, error) {
	if err := a.e.core.UserGrantRole(ctx, callerOf(ctx), r.User, r.Role); err != nil {
		return nil, err
	}
	return &pb.AuthUserGrantRoleResponse{Header: a.hdr(ctx)}, nil
}

func (a etcdAuth) UserRevokeRole(ctx context.Context, r *pb.AuthUserRevokeRoleRequest) (*pb.AuthUserRevokeRoleResponse, error) {
	if err := a.e.core.UserRevokeRole(ctx, callerOf(ctx), r.Name, r.Role); err != nil {
		return nil, err
	}
	return &pb.AuthUserRevokeRoleResponse{Header: a.hdr(ctx)}, nil
}

func (a etcdAuth) UserGet(ctx context.Context, r *pb.AuthUserGetRequest) (*pb.AuthUserGetResponse, error) {
	roles, err := a.e.core.UserGet(ctx, callerOf(ctx), r.Name)
	if err != nil {
		return nil, err
	}
	return &pb.AuthUserGetResponse{Header: a.hdr(ctx), Roles: roles}, nil
}

func (a etcdAuth) UserList(ctx context.Context, _ *pb.AuthUserListRequest) (*pb.AuthUserListResponse, error) {
	users, err := a.e.core.UserList(ctx, callerOf(ctx))
	if err != nil {
		return nil, err
	}
	return &pb.AuthUserListResponse{Header: a.hdr(ctx), Users: users}, nil
}

func (a etcdAuth) RoleAdd(ctx context.Context, r *pb.AuthRoleAddRequest) (*pb.AuthRoleAddResponse, error) {
	if err := a.e.core.RoleAdd(ctx, callerOf(ctx), r.Name); err != nil {
		return nil, err
	}
	return &pb.AuthRoleAddResponse{Header: a.hdr(ctx)}, nil
}

func (a etcdAuth) RoleDelete(ctx context.Context, r *pb.AuthRoleDeleteRequest) (*pb.AuthRoleDeleteResponse, error) {
	if err := a.e.core.RoleDelete(ctx, callerOf(ctx), r.Role); err != nil {
		return nil, err
	}
	return &pb.AuthRoleDeleteResponse{Header: a.hdr(ctx)}, nil
}

func (a etcdAuth) RoleList(ctx context.Context, _ *pb.AuthRoleListRequest) (*pb.AuthRoleListResponse, error) {
	roles, err := a.e.core.RoleList(ctx, callerOf(ctx))
	if err != nil {
		return nil, err
	}
	return &pb.AuthRoleListResponse{Header: a.hdr(ctx), Roles: roles}, nil
}

// rootPerm is what etcd answers for the role root: read and write on every key.
var rootPerm = authpb.Permission{PermType: authpb.READWRITE, Key: []byte{}, RangeEnd: []byte{0}}

// RoleGet answers a role's key rules as etcd permissions (a prefix rule as the range
// etcdctl's --prefix sends); its resource rules and operator rights have no etcd form
// and are left out. The role root answers etcd's one permission of every key.
func (a etcdAuth) RoleGet(ctx context.Context, r *pb.AuthRoleGetRequest) (*pb.AuthRoleGetResponse, error) {
	p, err := a.e.core.RoleGet(ctx, callerOf(ctx), r.Role)
	if err != nil {
		return nil, err
	}
	resp := &pb.AuthRoleGetResponse{Header: a.hdr(ctx)}
	if r.Role == "root" {
		resp.Perm = []*authpb.Permission{&rootPerm}
		return resp, nil
	}
	for _, k := range p.Keys {
		resp.Perm = append(resp.Perm, etcdPerm(k))
	}
	return resp, nil
}

// etcdPerm is a key rule as an etcd permission.
func etcdPerm(k api.ACLKeyRule) *authpb.Permission {
	perm := &authpb.Permission{Key: []byte(k.Key), RangeEnd: []byte(k.End)}
	if k.Key == "" { // a prefix rule
		perm.Key, perm.RangeEnd = []byte(k.Prefix), fsm.PrefixEnd([]byte(k.Prefix))
		if perm.RangeEnd == nil {
			perm.RangeEnd = []byte{0}
		}
	}
	switch k.Access {
	case api.AccessRead:
		perm.PermType = authpb.READ
	case api.AccessWriteOnly:
		perm.PermType = authpb.WRITE
	default:
		perm.PermType = authpb.READWRITE
	}
	return perm
}

// accessOf is an etcd permission type as a key rule's access.
func accessOf(t authpb.Permission_Type) string {
	switch t {
	case authpb.READ:
		return api.AccessRead
	case authpb.WRITE:
		return api.AccessWriteOnly
	}
	return api.AccessWrite
}

func (a etcdAuth) RoleGrantPermission(ctx context.Context, r *pb.AuthRoleGrantPermissionRequest) (*pb.AuthRoleGrantPermissionResponse, error) {
	if r.Perm == nil {
		return nil, rpctypes.ErrGRPCPermissionNotGiven
	}
	k := api.ACLKeyRule{Key: string(r.Perm.Key), End: string(r.Perm.RangeEnd), Access: accessOf(r.Perm.PermType)}
	if err := a.e.core.RoleGrantPermission(ctx, callerOf(ctx), r.Name, k); err != nil {
		return nil, err
	}
	return &pb.AuthRoleGrantPermissionResponse{Header: a.hdr(ctx)}, nil
}

func (a etcdAuth) RoleRevokePermission(ctx context.Context, r *pb.AuthRoleRevokePermissionRequest) (*pb.AuthRoleRevokePermissionResponse, error) {
	if err := a.e.core.RoleRevokePermission(ctx, callerOf(ctx), r.Role, string(r.Key), string(r.RangeEnd)); err != nil {
		return nil, err
	}
	return &pb.AuthRoleRevokePermissionResponse{Header: a.hdr(ctx)}, nil
}

// authSentinel is etcd's error for a refusal of the users and roles API or of a
// missing token, nil for any other error (etcdSentinel asks it).
func authSentinel(err error) error {
	for _, m := range authErrors {
		if errors.Is(err, m.err) {
			return m.etcd
		}
	}
	return nil
}

var authErrors = []struct{ err, etcd error }{
	{kv.ErrNoToken, rpctypes.ErrGRPCUserEmpty}, // etcd: a call without a token has no user
	{kv.ErrUserEmpty, rpctypes.ErrGRPCUserEmpty},
	{kv.ErrUserExists, rpctypes.ErrGRPCUserAlreadyExist},
	{kv.ErrUserNotFound, rpctypes.ErrGRPCUserNotFound},
	{kv.ErrRoleEmpty, rpctypes.ErrGRPCRoleEmpty},
	{kv.ErrRoleExists, rpctypes.ErrGRPCRoleAlreadyExist},
	{kv.ErrRoleNotFound, rpctypes.ErrGRPCRoleNotFound},
	{kv.ErrRoleNotGranted, rpctypes.ErrGRPCRoleNotGranted},
	{kv.ErrPermissionNotGranted, rpctypes.ErrGRPCPermissionNotGranted},
	{kv.ErrRootUserNotExist, rpctypes.ErrGRPCRootUserNotExist},
	{kv.ErrRootRoleNotExist, rpctypes.ErrGRPCRootRoleNotExist},
	{kv.ErrAuthNotEnabled, rpctypes.ErrGRPCAuthNotEnabled},
	{kv.ErrAuthFailed, rpctypes.ErrGRPCAuthFailed},
	{kv.ErrInvalidAuthMgmt, rpctypes.ErrGRPCInvalidAuthMgmt},
}
