//go:build tools

// Package s3 pins the seaweedfs module this directory builds `weed` from.
package s3

import _ "github.com/seaweedfs/seaweedfs/weed"
