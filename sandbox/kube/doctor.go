package kube

import "k8s.io/client-go/rest"

// Permission is what the driver does to one kind of object in its namespace: the rules
// of the Helm chart's Role (helm/cws/templates/kubernetes.yaml), which `cws doctor`
// checks a cluster's credentials against.
type Permission struct {
	Group, Resource string
	Verbs           []string
	Why             string
}

// Permissions are every verb the driver uses, resource by resource.
var Permissions = []Permission{
	{"", "pods", []string{"get", "list", "watch", "create", "delete", "patch"}, "its session pods: made, watched, handed over from the pool, deleted"},
	{"", "pods/exec", []string{"create", "get"}, "the exec transport: SPDY posts, WebSocket gets"},
	{"", "persistentvolumeclaims", []string{"get", "list", "create", "delete"}, "the workspace claims of --kube-storage-class"},
	{"networking.k8s.io", "networkpolicies", []string{"get", "create"}, "the instance's default-deny egress policy"},
}

// RESTConfig is the configuration the driver connects with: kubeconfig when given, else
// the in-cluster one in a pod, else the usual kubeconfig resolution.
func RESTConfig(kubeconfig string) (*rest.Config, error) { return restConfig(kubeconfig) }
