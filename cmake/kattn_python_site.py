"""Where `cmake --install` puts the Python package kattn, asked of the interpreter it is built for.

    python kattn_python_site.py PREFIX   ->   line 1: the directory, relative to PREFIX
                                              line 2: "yes" if the interpreter searches it, else "no"

The interpreter's own place for packages when it lies in PREFIX (Debian's python3 with PREFIX
/usr/local: lib/python3.X/dist-packages; a virtual environment's python with PREFIX the
environment: lib/python3.X/site-packages); otherwise the standard layout of a prefix,
lib/python3.X/site-packages, which the user puts on PYTHONPATH.
"""

import os
import sys
import sysconfig


def relative_site_dir(prefix):
    prefix = os.path.realpath(prefix)
    own = os.path.realpath(sysconfig.get_path("platlib"))
    if os.path.commonpath([own, prefix]) == prefix:
        return os.path.relpath(own, prefix)
    standard = sysconfig.get_path("platlib", "posix_prefix", vars={"base": prefix, "platbase": prefix})
    return os.path.relpath(standard, prefix)


def main():
    prefix = sys.argv[1]
    site = relative_site_dir(prefix)
    searched = os.path.realpath(os.path.join(prefix, site)) in {os.path.realpath(p) for p in sys.path if p}
    print(site)
    print("yes" if searched else "no")


if __name__ == "__main__":
    main()
