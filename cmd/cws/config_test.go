package main

import (
	"slices"
	"testing"

	"github.com/spf13/pflag"

	"github.com/cwsdev/cws/sandbox/docker"
)

func TestPoolFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    []docker.PoolSize
		wantErr bool
	}{
		{name: "none by default", args: []string{"--tenants", "t.yaml"}},
		{name: "dev pools the default image", args: []string{"--dev", "--default-image", "img:1"},
			want: []docker.PoolSize{{Image: "img:1", Size: devPoolSize}}},
		{name: "dev, turned off", args: []string{"--dev", "--default-image", "img:1", "--pool", "img:1=0"}},
		{name: "repeatable, registry port kept", args: []string{"--tenants", "t.yaml", "--pool", "reg:5000/a:1=4", "--pool", "b=1"},
			want: []docker.PoolSize{{Image: "reg:5000/a:1", Size: 4}, {Image: "b", Size: 1}}},
		{name: "from the environment", args: []string{"--tenants", "t.yaml"}, env: map[string]string{"CWS_POOL": "a=1,b=2"},
			want: []docker.PoolSize{{Image: "a", Size: 1}, {Image: "b", Size: 2}}},
		{name: "no size", args: []string{"--tenants", "t.yaml", "--pool", "a"}, wantErr: true},
		{name: "negative", args: []string{"--tenants", "t.yaml", "--pool", "a=-1"}, wantErr: true},
		{name: "bad max", args: []string{"--tenants", "t.yaml"}, env: map[string]string{"CWS_POOL_MAX": "x"}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var c Config
			f := pflag.NewFlagSet("serve", pflag.ContinueOnError)
			c.flags(f, func(k string) string { return tc.env[k] })
			if err := f.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := c.parsePools()
			if (err != nil) != tc.wantErr {
				t.Fatalf("parsePools = %v, want error %v", err, tc.wantErr)
			}
			if !tc.wantErr && !slices.Equal(c.pools, tc.want) {
				t.Errorf("pools = %+v, want %+v", c.pools, tc.want)
			}
		})
	}
}
