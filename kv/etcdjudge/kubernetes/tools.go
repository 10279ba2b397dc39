//go:build tools

// tools.go keeps in this module's go.mod and go.sum every module that the judged
// Kubernetes test packages and kube-apiserver need: the harness builds them with
// `go test -c k8s.io/kubernetes/test/integration/<pkg>` and `go build
// k8s.io/kubernetes/cmd/kube-apiserver`, and a plain `go mod tidy` only keeps what
// this module's own packages import.
package kubernetes

import (
	_ "k8s.io/apiextensions-apiserver/test/integration"
	_ "k8s.io/apiextensions-apiserver/test/integration/fixtures"
	_ "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset/typed/apiregistration/v1"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager/app/testing"
	_ "k8s.io/kubernetes/pkg/controller/storageversiongc"
	_ "k8s.io/kubernetes/test/images/agnhost/crd-conversion-webhook/converter"
	_ "k8s.io/kubernetes/test/integration"
	_ "k8s.io/kubernetes/test/integration/etcd"
	_ "k8s.io/kubernetes/test/integration/framework"
	_ "k8s.io/kubernetes/test/utils"
	_ "k8s.io/kubernetes/test/utils/ktesting"
	_ "k8s.io/kubernetes/test/utils/kubeconfig"
)
