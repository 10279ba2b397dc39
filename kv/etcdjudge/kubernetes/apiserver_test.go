package kubernetes

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// kubeAPIServer is a kube-apiserver process (no kubelet, no controllers) whose
// storage is a cluster's etcd doors, and clients for it.
type kubeAPIServer struct {
	proc    *process
	config  *rest.Config
	kube    kubernetes.Interface
	crds    apiextensionsclient.Interface
	dynamic dynamic.Interface
}

// startKubeAPIServer runs the kube-apiserver binary on a free loopback port with
// --etcd-servers set to every door of c (its etcd client balances over them),
// authorizing everything (--authorization-mode=AlwaysAllow) for one bearer token it
// makes, serving on a certificate it generates itself in a temp dir. extra flags
// come last. It waits until /readyz answers ok (two minutes at most).
func startKubeAPIServer(t *testing.T, bin string, c *cluster, extra ...string) *kubeAPIServer {
	t.Helper()
	dir := t.TempDir()
	token := writeAPIServerSecrets(t, dir)
	var urls []string
	for _, d := range c.doors() {
		urls = append(urls, "http://"+d)
	}
	addr := freeAddr()
	_, port, _ := strings.Cut(addr, ":")
	args := append([]string{
		"--etcd-servers=" + strings.Join(urls, ","),
		"--bind-address=127.0.0.1", "--secure-port=" + port,
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + filepath.Join(dir, "sa.key"),
		"--service-account-signing-key-file=" + filepath.Join(dir, "sa.key"),
		"--service-cluster-ip-range=10.0.0.0/24",
		"--token-auth-file=" + filepath.Join(dir, "tokens.csv"),
		"--authorization-mode=AlwaysAllow",
		"--anonymous-auth=false",
		"--profiling=false",
	}, extra...)
	logDir := os.Getenv("KEEL_K8S_LOG_DIR")
	if logDir == "" {
		logDir = dir
	}
	logPath := filepath.Join(logDir, strings.ReplaceAll(t.Name(), "/", "_")+".kube-apiserver.log")
	s := &kubeAPIServer{proc: startProcess(t, logPath, bin, args...)}
	s.config = &rest.Config{
		Host:        "https://" + addr,
		BearerToken: token,
		// The self-signed serving certificate is issued for the service's names; its
		// file holds the certificate and the CA that signed it.
		TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(dir, "certs", "apiserver.crt"), ServerName: "kubernetes.default.svc"},
		QPS:             -1, // no client-side rate limit
	}
	s.proc.waitReadyWithin(t, "kube-apiserver", 2*time.Minute, func() bool {
		if _, err := os.Stat(s.config.CAFile); err != nil {
			return false
		}
		if s.kube == nil {
			s.kube = kubernetes.NewForConfigOrDie(s.config)
		}
		return s.readyz() == nil
	})
	s.crds = apiextensionsclient.NewForConfigOrDie(s.config)
	s.dynamic = dynamic.NewForConfigOrDie(s.config)
	t.Logf("kube-apiserver at %s on %s %v (log %s)", s.config.Host, c.kind, c.doors(), logPath)
	return s
}

// readyz is nil when the apiserver's /readyz answers ok.
func (s *kubeAPIServer) readyz() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := s.kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	return err
}

// writeAPIServerSecrets writes into dir the service-account signing key (sa.key) and
// a static token file (tokens.csv) with one token in group system:masters, which it
// returns.
func writeAPIServerSecrets(t *testing.T, dir string) string {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	b := make([]byte, 16)
	rand.Read(b)
	token := hex.EncodeToString(b)
	tokens := fmt.Sprintf("%s,judge,judge-uid,\"system:masters\"\n", token)
	for name, data := range map[string][]byte{"sa.key": pemKey, "tokens.csv": []byte(tokens)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return token
}
