package v1alpha1

// NodeAudience is the audience of a token made for one node agent's
// endpoint alone. `airlock --context` requests such a token for its
// service account (a TokenRequest) and sends it to the node in place of
// the kubeconfig's own: the API server takes only its own audiences, so a
// node that keeps the token cannot act with it at the API server, and
// another node, reviewing for its own audience, refuses it.
func NodeAudience(node string) string { return GroupVersion.Group + "/nodes/" + node }
