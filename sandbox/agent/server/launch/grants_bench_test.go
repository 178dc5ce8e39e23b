package launch

import "testing"

func BenchmarkGrants(b *testing.B) {
	for b.Loop() {
		Grants([]string{"true", "git", "python3"}, "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "/workspace")
	}
}
