package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the group and version of these types.
var GroupVersion = schema.GroupVersion{Group: "airlock.dev", Version: "v1alpha1"}

var (
	// SchemeBuilder registers these types with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds these types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &Session{}, &SessionList{}, &SessionPool{}, &SessionPoolList{}, &AirlockNode{}, &AirlockNodeList{}, &SessionApproval{}, &SessionApprovalList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
