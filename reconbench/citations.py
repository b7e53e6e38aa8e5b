"""BibTeX of the project and of the papers its built-in attacks implement.

Each entry holds only what the papers' text and the attack notes state (title, authors as printed there, venue,
year, arXiv id); a field that could not be checked there is left out rather than filled in from memory. The
project's own entry mirrors ``CITATION.cff`` at the repository root (a test holds the two together), so that an
installed package, which does not ship that file, prints the same citation."""

from __future__ import annotations

from importlib import metadata

#: the project as CITATION.cff names it
PROJECT_TITLE = "reconbench: an open benchmark suite for training-data reconstruction attacks"
PROJECT_AUTHOR = "The reconbench maintainers"
PROJECT_YEAR = 2026

HAIM_2022 = """@inproceedings{haim2022reconstructing,
  title = {Reconstructing Training Data from Trained Neural Networks},
  author = {Haim, Niv and Vardi, Gal and Yehudai, Gilad and Shamir, Ohad and Irani, Michal},
  booktitle = {Advances in Neural Information Processing Systems (NeurIPS)},
  year = {2022}
}"""

BUZAGLO_2023 = """@inproceedings{buzaglo2023deconstructing,
  title = {Deconstructing Data Reconstruction: Multiclass, Weight Decay and General Losses},
  author = {Buzaglo, Gon and Haim, Niv and Yehudai, Gilad and Vardi, Gal and Oz, Yakir and Nikankin, Yaniv and Irani, Michal},
  booktitle = {Advances in Neural Information Processing Systems (NeurIPS)},
  year = {2023},
  eprint = {2307.01827},
  archiveprefix = {arXiv}
}"""

RUNKEL_2024 = """@misc{runkel2024training,
  title = {Training Data Reconstruction: Privacy due to Uncertainty?},
  author = {Runkel, Christina and Gandikota, Kanchana Vaishnavi and Geiping, Jonas and
            Sch{\\"o}nlieb, Carola-Bibiane and Moeller, Michael},
  year = {2024},
  eprint = {2412.08544},
  archiveprefix = {arXiv},
  note = {CVPR 2025 workshops}
}"""

LOO_2024 = """@inproceedings{loo2024understanding,
  title = {Understanding Reconstruction Attacks with the Neural Tangent Kernel and Dataset Distillation},
  author = {Loo, N. and Hasani, R. and Lechner, M. and Amini, A. and Rus, D.},
  booktitle = {International Conference on Learning Representations (ICLR)},
  year = {2024},
  eprint = {2302.01428},
  archiveprefix = {arXiv}
}"""

IURADA_2026 = """@inproceedings{iurada2026law,
  title = {A Law of Data Reconstruction for Random Features (and Beyond)},
  author = {Iurada, L. and Bombari, S. and Tommasi, T. and Mondelli, M.},
  booktitle = {International Conference on Learning Representations (ICLR)},
  year = {2026},
  eprint = {2509.22214},
  archiveprefix = {arXiv}
}"""


def project_version() -> str:
    """The installed reconbench version (the one CITATION.cff names at a release)."""
    try:
        return metadata.version("reconbench")
    except metadata.PackageNotFoundError:
        return "unknown"


def project_bibtex() -> str:
    """The project's BibTeX entry, as CITATION.cff states it."""
    return (f"@software{{reconbench,\n  title = {{{PROJECT_TITLE}}},\n  author = {{{{{PROJECT_AUTHOR}}}}},\n"
            f"  year = {{{PROJECT_YEAR}}},\n  version = {{{project_version()}}},\n  license = {{MIT}}\n}}")
