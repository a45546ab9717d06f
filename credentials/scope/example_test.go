package scope_test

import (
	"fmt"

	"github.com/airlock-sandbox/airlock/credentials/scope"
)

func ExampleScope_Allows() {
	s, err := scope.Parse("git.push repo=app ref=refs/heads/alex/*")
	if err != nil {
		panic(err)
	}
	for _, ref := range []string{"refs/heads/alex/fix", "refs/heads/alex/a/b", "refs/heads/main"} {
		ok := s.Allows(scope.Request{Action: "git.push", Attrs: map[string]string{"repo": "app", "ref": ref}})
		fmt.Println(ref, ok)
	}
	fmt.Println(s)
	// Output:
	// refs/heads/alex/fix true
	// refs/heads/alex/a/b false
	// refs/heads/main false
	// git.push ref=refs/heads/alex/* repo=app
}
