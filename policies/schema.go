// Markers for controller-gen, which derives the Kubernetes CRD schema of
// kube/apis/airlock/v1alpha1 from these types (its Session embeds Policy)
// and generates their DeepCopy methods (zz_generated.deepcopy.go; `make
// generate`). A field is optional in that schema unless it is marked
// +required: the decoder's defaults and (*Policy).Validate decide the rest,
// on the node agent as in the daemon.
// +kubebuilder:validation:Optional

package policies
