// Package version holds the cws release version, shared by the service, the agent
// and the image tags. The Makefile reads Version from this file.
package version

// Version is the cws release. Images are tagged with it (cws-workspace:<Version>).
const Version = "0.1.0"

// Commit is the git commit, set at link time (-X github.com/cwsdev/cws/version.Commit=…).
var Commit = "unknown"

// WorkspaceImage is the default workspace image, built by `make images`.
const WorkspaceImage = "cws-workspace:" + Version

// TestImage is the small FROM-scratch busybox image used to prove that the agent runs in any image.
const TestImage = "cws-testbox:" + Version
