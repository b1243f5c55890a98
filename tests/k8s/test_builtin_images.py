"""``forge image build --builtin NAME`` and ``forge image builtins``: the images forge ships are plugins registered by
name (``BuiltinImage``; forge's own in ``*/builtin_image.py``), their tags are the ones the experiment uses, bad input
is one message with exit 2 before dockerd is asked anything, the bundles image's context links the bundles (and
makes unreadable files readable in copies, never in $FORGE_HOME), a plugin from a package of its own builds, and a
Kubernetes dry run names every image the cluster pulls. Building forge's own images: tests/k8s/test_images.py (e2e).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from forge_cli.config.schema import KubernetesRuntime
from forge_cli.harness.builtin_image import BundlesImage
from forge_cli.runtime.images import BUILTIN_IMAGES
from tests.helpers import forge, install_module, temporary_package


def test_forge_ships_three_images_whose_tags_the_experiment_uses() -> None:
    listed = forge("image", "builtins")
    assert listed.returncode == 0, listed.stderr
    names = [line.split()[0] for line in listed.stdout.splitlines()]
    assert names == ["bundles", "controller", "desktop"]
    runtime = KubernetesRuntime(kind="kubernetes", description="x")
    assert BUILTIN_IMAGES.get("controller").tag == runtime.proxy_image == "forge:latest"
    assert BUILTIN_IMAGES.get("bundles").tag == runtime.bundle_image == "forge-harness-bundles:latest"


@pytest.mark.parametrize(("args", "message"), [
    (["--builtin", "nope"], "unknown builtin image 'nope' (registered: bundles, controller, desktop"),
    (["--builtin", "controller", "--harness", "pi"], "the controller image holds no harness bundles"),
    (["--builtin", "bundles", "--harness", "not-a-harness"], "harness bundle(s) not installed: not-a-harness"),
    (["--harness", "pi", "sometag"], "--harness goes with --builtin bundles"),
])
def test_bad_input_is_one_message_and_exit_2(args: list[str], message: str) -> None:
    # an unreachable daemon: bad input must be refused before dockerd is asked anything
    done = forge("image", "build", *args, "--docker-host", "tcp://127.0.0.1:9")
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, done.stderr


def _bundle(home: Path, name: str) -> Path:
    bundle = home / "harnesses" / name
    (bundle / "bin").mkdir(parents=True)
    (bundle / "bin" / name).write_text("#!/bin/sh\necho ran\n")
    (bundle / "bin" / name).chmod(0o744)  # runnable by its owner only
    (bundle / "data.txt").write_text("data")
    (bundle / "secret-mode.txt").write_text("x")
    (bundle / "secret-mode.txt").chmod(0o600)
    os.symlink("data.txt", bundle / "link")
    (bundle / "manifest.json").write_text(json.dumps({"name": name}))
    return bundle


def test_the_bundles_context_links_the_bundles_and_reads_for_every_user(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORGE_HOME", str(tmp_path / "home"))
    first, second = _bundle(tmp_path / "home", "one"), _bundle(tmp_path / "home", "two")
    (tmp_path / "home" / "harnesses" / "half-installed").mkdir()  # no manifest: not installed
    image = BundlesImage()
    assert image.harnesses == ["one", "two"] and BundlesImage(["two"]).harnesses == ["two"]
    context = tmp_path / "context"
    context.mkdir()
    dockerfile = image.prepare(context, None)
    assert dockerfile.read_text().startswith("FROM forge-base:bookworm\nCOPY bundles /bundles\n")
    for bundle in (first, second):
        copied = context / "bundles" / bundle.name
        assert (copied / "data.txt").stat().st_ino == (bundle / "data.txt").stat().st_ino  # hard-linked
        assert os.readlink(copied / "link") == "data.txt"
        # copies made readable (and runnable) for the pods' user; the installed bundle unchanged
        assert (copied / "secret-mode.txt").stat().st_mode & 0o777 == 0o644
        assert (copied / "bin" / bundle.name).stat().st_mode & 0o777 == 0o755
        assert (bundle / "secret-mode.txt").stat().st_mode & 0o777 == 0o600
        assert (bundle / "bin" / bundle.name).stat().st_mode & 0o777 == 0o744


PLUGIN = '''
from pathlib import Path

from forge_cli.runtime.images import BuiltinImage


class Tiny(BuiltinImage, name="tiny-test-image"):
    tag = "forge-test-tiny:latest"
    summary = "a test's own image"

    def prepare(self, context, echo):
        (context / "hello.txt").write_text("hello")
        dockerfile = context / "Dockerfile"
        dockerfile.write_text("FROM forge-base:bookworm\\nCOPY hello.txt /hello.txt\\nLABEL forge.test=tiny\\n")
        return dockerfile
'''


@pytest.mark.docker
@pytest.mark.requires("docker")
def test_a_packages_own_image_builds_by_its_dotted_path(tmp_path: Path) -> None:
    with temporary_package(tmp_path, "tinyimages") as package:
        install_module(package, "images", PLUGIN)
        try:
            built = forge("image", "build", "--builtin", "tinyimages.images:Tiny", "-q",
                          env={"PYTHONPATH": str(tmp_path)})
            assert built.returncode == 0, built.stderr
            labels = subprocess.run(["docker", "image", "inspect", "forge-test-tiny:latest", "--format",
                                     "{{json .Config.Labels}}"], capture_output=True, text=True, check=True)
            assert json.loads(labels.stdout) == {"forge.test": "tiny"}
            assert built.stdout.strip().startswith("sha256:")
        finally:
            BUILTIN_IMAGES.remove("tiny-test-image")
            subprocess.run(["docker", "image", "rm", "-f", "forge-test-tiny:latest"], capture_output=True)


def test_a_kubernetes_dry_run_names_the_images_the_cluster_pulls() -> None:
    plan = forge("rollout", "runtime=kubernetes", "proxy.url=http://127.0.0.1:8800", "rollout.max_tasks=1",
                 "--dry-run", env={"FORGE_PROXY_TOKEN": "x" * 32, "COLUMNS": "200"})
    assert plan.returncode == 0, plan.stderr
    assert "sandbox (env.image): forge-base:bookworm" in plan.stdout
    assert "harness bundles (runtime.bundle_image): forge-harness-bundles:latest: forge image build --builtin " \
           "bundles" in plan.stdout
    assert "proxy and controller (runtime.proxy_image): forge:latest: forge image build --builtin controller" in \
        plan.stdout
    assert "pod security: restricted (every process as 1000:1000)" in plan.stdout


DEFECTS = {  # a copy of the tiny image with one planted defect each, and what the kit must say
    "tag": ('tag = "forge-test-tiny:latest"', 'tag = "Forge Tiny!"', "is not an image reference"),
    "summary": ('summary = "a test\'s own image"', 'summary = "two\\nlines"', "one-line summary"),
    "pulls": ('FROM forge-base:bookworm', 'FROM docker.io/library/debian:12', "an image of registry docker.io"),
    "outside": ('(context / "hello.txt").write_text("hello")', '(context.parent / "hello.txt").write_text("hello")',
                "wrote outside the context"),
    "no dockerfile": ("        return dockerfile", "        return context / 'missing'", "not a Dockerfile inside"),
}


def test_the_kit_passes_forges_images_and_a_packages_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from forge_cli.testing.builtin_image import check_builtin_image

    # the controller's and the desktop's contexts build wheels with pip (minutes): their declarations are checked
    assert check_builtin_image("controller", prepare=False) == []
    assert check_builtin_image("desktop", prepare=False) == []
    monkeypatch.setenv("FORGE_HOME", str(tmp_path / "home"))
    _bundle(tmp_path / "home", "one")
    assert check_builtin_image("bundles") == [] and check_builtin_image("bundles", ["one"]) == []
    assert check_builtin_image("bundles", ["nope"]) == ["it refuses --harness ['nope']: harness bundle(s) not "
                                                        "installed: nope"]
    with temporary_package(tmp_path, "kitimages") as package:
        install_module(package, "images", PLUGIN)
        try:
            assert check_builtin_image("kitimages.images:Tiny") == []
            assert check_builtin_image("tiny-test-image") == []
            assert check_builtin_image("controller", ["pi"]) == ["it refuses --harness ['pi']: --harness: the "
                                                                 "controller image holds no harness bundles"]
            for defect, (old, new, said) in DEFECTS.items():
                assert old in PLUGIN, defect
                module = "broken_" + defect.replace(" ", "_")
                broken = PLUGIN.replace(old, new).replace('name="tiny-test-image"', f'name="tiny-{module}"')
                install_module(package, module, broken)
                problems = check_builtin_image(f"kitimages.{module}:Tiny")
                assert any(said in p for p in problems), (defect, problems)
            install_module(package, "noprepare", "from forge_cli.runtime.images import BuiltinImage\n\n\n"
                           "class Tiny(BuiltinImage, name='tiny-no-prepare'):\n    tag = 'a:b'\n    summary = 's'\n")
            assert "it cannot be made: Can't instantiate abstract class" in " ".join(
                check_builtin_image("kitimages.noprepare:Tiny"))
            install_module(package, "notanimage", "class Tiny:\n    pass\n")
            assert "is not a builtin image" in " ".join(check_builtin_image("kitimages.notanimage:Tiny"))
        finally:
            for name in [n for n in BUILTIN_IMAGES.names() if n.startswith("tiny-")]:
                BUILTIN_IMAGES.remove(name)
