"""Test support shared by the tiers (and by bench/): builders for test objects, the real control plane
and its kubelet stand-in, the operator as the chart installs it, trainer runs and fault plugins. Test
modules import from here, never from each other."""
