// Package deploytest proves deploy/kubernetes against a real control plane
// (kube/kubetest) and a real node agent: its tests apply every manifest the
// kustomization lists, in its order, run airlockd-kube with the DaemonSet's
// arguments and only the rights the manifests grant, through a
// service-account token bound to a Pod on a Node as the DaemonSet's would
// be, and attack the node restriction with one node's credentials against
// another node's objects. TestDaemonSetUnderKubelet runs the DaemonSet's pod
// itself under a real kubelet, on a node of the test's own (kubeNode). The
// package holds tests only.
package deploytest
