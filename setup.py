"""Everything is declared in setup.cfg; this file only puts ``popdist_launcher.pth`` at the root of
site-packages (a wheel's purelib root), for every Python version: that .pth file starts the IPU
import alias and Keras 2 with every interpreter of the environment. scripts/setup.sh also copies
it there for the editable install."""
import os

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "popdist_launcher.pth"


class BuildPyWithPth(build_py):
    def run(self):
        super().run()
        self.copy_file(PTH, os.path.join(self.build_lib, PTH))

    def get_outputs(self, include_bytecode=True):
        return super().get_outputs(include_bytecode) + [os.path.join(self.build_lib, PTH)]


setup(cmdclass={"build_py": BuildPyWithPth})
