"""The class splits of Meta-Dataset (Triantafillou et al., 2020) for the cross-domain test sets, and the CUB-200
images that are also in ILSVRC-2012, as learn2learn 0.2.0 lists them (``learn2learn.vision.datasets``, MIT licence):
the data that its readers held, kept here so that reading the files on disk needs no learn2learn
(``tests/data/test_meta_dataset_splits.py`` checks them against learn2learn's own lists where it is installed).

Each split lists its classes in the order that gives their labels (local label ``j`` is the ``j``-th name).

References:
    Triantafillou et al., 2020. "Meta-Dataset: A Dataset of Datasets for Learning to Learn from Few Examples." ICLR.
"""

from __future__ import annotations

__all__ = ["CUB200", "CUB200_IMAGENET_DUPLICATES", "DTD", "FGVC_AIRCRAFT", "VGG_FLOWERS"]


def _names(text: str) -> tuple[str, ...]:
    """The comma-separated names of ``text``, in order (line breaks are spaces)."""
    return tuple(" ".join(name.split()) for name in text.split(",") if name.strip())


#: CUB-200-2011 species folders per split (140 / 30 / 30).
CUB200: dict[str, tuple[str, ...]] = {
    "train": _names(
        """
        190.Red_cockaded_Woodpecker, 144.Common_Tern, 014.Indigo_Bunting, 012.Yellow_headed_Blackbird,
        059.California_Gull, 031.Black_billed_Cuckoo, 071.Long_tailed_Jaeger, 018.Spotted_Catbird,
        177.Prothonotary_Warbler, 040.Olive_sided_Flycatcher, 063.Ivory_Gull, 073.Blue_Jay,
        166.Golden_winged_Warbler, 160.Black_throated_Blue_Warbler, 016.Painted_Bunting, 149.Brown_Thrasher,
        126.Nelson_Sharp_tailed_Sparrow, 090.Red_breasted_Merganser, 074.Florida_Jay, 058.Pigeon_Guillemot,
        105.Whip_poor_Will, 043.Yellow_bellied_Flycatcher, 158.Bay_breasted_Warbler, 192.Downy_Woodpecker,
        129.Song_Sparrow, 161.Blue_winged_Warbler, 132.White_crowned_Sparrow, 146.Forsters_Tern,
        011.Rusty_Blackbird, 070.Green_Violetear, 197.Marsh_Wren, 041.Scissor_tailed_Flycatcher,
        100.Brown_Pelican, 120.Fox_Sparrow, 032.Mangrove_Cuckoo, 119.Field_Sparrow, 183.Northern_Waterthrush,
        007.Parakeet_Auklet, 053.Western_Grebe, 001.Black_footed_Albatross, 102.Western_Wood_Pewee,
        164.Cerulean_Warbler, 036.Northern_Flicker, 131.Vesper_Sparrow, 098.Scott_Oriole,
        188.Pileated_Woodpecker, 139.Scarlet_Tanager, 107.Common_Raven, 108.White_necked_Raven,
        184.Louisiana_Waterthrush, 099.Ovenbird, 171.Myrtle_Warbler, 075.Green_Jay, 097.Orchard_Oriole,
        152.Blue_headed_Vireo, 173.Orange_crowned_Warbler, 095.Baltimore_Oriole, 042.Vermilion_Flycatcher,
        054.Blue_Grosbeak, 079.Belted_Kingfisher, 006.Least_Auklet, 142.Black_Tern, 078.Gray_Kingbird,
        047.American_Goldfinch, 050.Eared_Grebe, 037.Acadian_Flycatcher, 196.House_Wren,
        083.White_breasted_Kingfisher, 062.Herring_Gull, 138.Tree_Swallow, 060.Glaucous_winged_Gull,
        182.Yellow_Warbler, 027.Shiny_Cowbird, 174.Palm_Warbler, 157.Yellow_throated_Vireo,
        117.Clay_colored_Sparrow, 175.Pine_Warbler, 024.Red_faced_Cormorant, 106.Horned_Puffin,
        151.Black_capped_Vireo, 005.Crested_Auklet, 185.Bohemian_Waxwing, 049.Boat_tailed_Grackle,
        010.Red_winged_Blackbird, 153.Philadelphia_Vireo, 017.Cardinal, 023.Brandt_Cormorant,
        115.Brewer_Sparrow, 104.American_Pipit, 109.American_Redstart, 167.Hooded_Warbler, 123.Henslow_Sparrow,
        019.Gray_Catbird, 067.Anna_Hummingbird, 081.Pied_Kingfisher, 077.Tropical_Kingbird,
        088.Western_Meadowlark, 048.European_Goldfinch, 141.Artic_Tern, 013.Bobolink, 029.American_Crow,
        025.Pelagic_Cormorant, 135.Bank_Swallow, 056.Pine_Grosbeak, 179.Tennessee_Warbler, 087.Mallard,
        195.Carolina_Wren, 038.Great_Crested_Flycatcher, 092.Nighthawk, 187.American_Three_toed_Woodpecker,
        003.Sooty_Albatross, 004.Groove_billed_Ani, 156.White_eyed_Vireo, 180.Wilson_Warbler,
        034.Gray_crowned_Rosy_Finch, 093.Clark_Nutcracker, 110.Geococcyx, 154.Red_eyed_Vireo, 143.Caspian_Tern,
        089.Hooded_Merganser, 186.Cedar_Waxwing, 069.Rufous_Hummingbird, 125.Lincoln_Sparrow,
        026.Bronzed_Cowbird, 111.Loggerhead_Shrike, 022.Chuck_will_Widow, 165.Chestnut_sided_Warbler,
        021.Eastern_Towhee, 191.Red_headed_Woodpecker, 086.Pacific_Loon, 124.Le_Conte_Sparrow,
        002.Laysan_Albatross, 033.Yellow_billed_Cuckoo, 189.Red_bellied_Woodpecker, 116.Chipping_Sparrow,
        130.Tree_Sparrow, 114.Black_throated_Sparrow, 065.Slaty_backed_Gull, 091.Mockingbird,
        181.Worm_eating_Warbler
        """
    ),
    "validation": _names(
        """
        044.Frigatebird, 051.Horned_Grebe, 052.Pied_billed_Grebe, 055.Evening_Grosbeak,
        057.Rose_breasted_Grosbeak, 061.Heermann_Gull, 064.Ring_billed_Gull, 066.Western_Gull,
        068.Ruby_throated_Hummingbird, 072.Pomarine_Jaeger, 076.Dark_eyed_Junco, 080.Green_Kingfisher,
        084.Red_legged_Kittiwake, 096.Hooded_Oriole, 113.Baird_Sparrow, 121.Grasshopper_Sparrow,
        127.Savannah_Sparrow, 136.Barn_Swallow, 140.Summer_Tanager, 145.Elegant_Tern, 150.Sage_Thrasher,
        155.Warbling_Vireo, 159.Black_and_white_Warbler, 162.Canada_Warbler, 172.Nashville_Warbler,
        176.Prairie_Warbler, 178.Swainson_Warbler, 198.Rock_Wren, 199.Winter_Wren, 200.Common_Yellowthroat
        """
    ),
    "test": _names(
        """
        008.Rhinoceros_Auklet, 009.Brewer_Blackbird, 015.Lazuli_Bunting, 020.Yellow_breasted_Chat,
        028.Brown_Creeper, 030.Fish_Crow, 035.Purple_Finch, 039.Least_Flycatcher, 045.Northern_Fulmar,
        046.Gadwall, 082.Ringed_Kingfisher, 085.Horned_Lark, 094.White_breasted_Nuthatch, 101.White_Pelican,
        103.Sayornis, 112.Great_Grey_Shrike, 118.House_Sparrow, 122.Harris_Sparrow, 128.Seaside_Sparrow,
        133.White_throated_Sparrow, 134.Cape_Glossy_Starling, 137.Cliff_Swallow, 147.Least_Tern,
        148.Green_tailed_Towhee, 163.Cape_May_Warbler, 168.Kentucky_Warbler, 169.Magnolia_Warbler,
        170.Mourning_Warbler, 193.Bewick_Wren, 194.Cactus_Wren
        """
    ),
}


#: The 43 CUB images also in ILSVRC-2012, per split, left out (none in test).
CUB200_IMAGENET_DUPLICATES: dict[str, tuple[str, ...]] = {
    "train": _names(
        """
        American_Goldfinch_0062_31921.jpg, Indigo_Bunting_0063_11820.jpg, Blue_Jay_0053_62744.jpg,
        American_Goldfinch_0131_32911.jpg, Indigo_Bunting_0051_12837.jpg, American_Goldfinch_0012_32338.jpg,
        Laysan_Albatross_0033_658.jpg, Black_Footed_Albatross_0024_796089.jpg, Indigo_Bunting_0072_14197.jpg,
        Green_Violetear_0002_795699.jpg, Black_Footed_Albatross_0033_796086.jpg,
        Black_Footed_Albatross_0086_796062.jpg, Anna_Hummingbird_0034_56614.jpg,
        American_Goldfinch_0064_32142.jpg, Red_Breasted_Merganser_0068_79203.jpg, Blue_Jay_0033_62024.jpg,
        Indigo_Bunting_0071_11639.jpg, Red_Breasted_Merganser_0001_79199.jpg, Indigo_Bunting_0060_14495.jpg,
        Laysan_Albatross_0053_543.jpg, American_Goldfinch_0018_32324.jpg, Red_Breasted_Merganser_0034_79292.jpg,
        Mallard_0067_77623.jpg, Red_Breasted_Merganser_0083_79562.jpg, Laysan_Albatross_0049_918.jpg,
        Black_Footed_Albatross_0002_55.jpg, Red_Breasted_Merganser_0012_79425.jpg,
        Indigo_Bunting_0031_13300.jpg, Blue_Jay_0049_63082.jpg, Indigo_Bunting_0010_13000.jpg,
        Red_Breasted_Merganser_0004_79232.jpg, Red_Breasted_Merganser_0045_79358.jpg,
        American_Goldfinch_0116_31943.jpg, Blue_Jay_0068_61543.jpg, Indigo_Bunting_0073_13933.jpg
        """
    ),
    "validation": _names(
        """
        Dark_Eyed_Junco_0057_68650.jpg, Dark_Eyed_Junco_0102_67402.jpg,
        Ruby_Throated_Hummingbird_0090_57411.jpg, Dark_Eyed_Junco_0031_66785.jpg,
        Dark_Eyed_Junco_0037_66321.jpg, Dark_Eyed_Junco_0111_66488.jpg,
        Ruby_Throated_Hummingbird_0040_57982.jpg, Dark_Eyed_Junco_0104_67820.jpg
        """
    ),
    "test": (),
}


#: Describable Textures class folders per split (33 / 7 / 7).
DTD: dict[str, tuple[str, ...]] = {
    "train": _names(
        """
        chequered, braided, interlaced, matted, honeycombed, marbled, veined, frilly, zigzagged, cobwebbed,
        pitted, waffled, fibrous, flecked, grooved, potholed, blotchy, stained, crystalline, dotted, striped,
        swirly, meshed, bubbly, studded, pleated, lacelike, polka-dotted, perforated, freckled, smeared,
        cracked, wrinkled
        """
    ),
    "validation": _names(
        """
        gauzy, grid, lined, paisley, porous, scaly, spiralled
        """
    ),
    "test": _names(
        """
        banded, bumpy, crosshatched, knitted, sprinkled, stratified, woven
        """
    ),
}


#: FGVC-Aircraft variants per split (70 / 15 / 15), as ``images_variant_*.txt`` names them.
FGVC_AIRCRAFT: dict[str, tuple[str, ...]] = {
    "train": _names(
        """
        A340-300, A318, Falcon 2000, F-16A/B, F/A-18, C-130, MD-80, BAE 146-200, 777-200, 747-400, Cessna 172,
        An-12, A330-300, A321, Fokker 100, Fokker 50, DHC-1, Fokker 70, A340-200, DC-6, 747-200, Il-76, 747-300,
        Model B200, Saab 340, Cessna 560, Dornier 328, E-195, ERJ 135, 747-100, 737-600, C-47, DR-400, ATR-72,
        A330-200, 727-200, 737-700, PA-28, ERJ 145, 737-300, 767-300, 737-500, 737-200, DHC-6, Falcon 900, DC-3,
        Eurofighter Typhoon, Challenger 600, Hawk T1, A380, 777-300, E-190, DHC-8-100, Cessna 525, Metroliner,
        EMB-120, Tu-134, Embraer Legacy 600, Gulfstream IV, Tu-154, MD-87, A300B4, A340-600, A340-500, MD-11,
        707-320, Cessna 208, Global Express, A319, DH-82
        """
    ),
    "validation": _names(
        """
        737-900, 757-300, 767-200, A310, A320, BAE 146-300, CRJ-900, DC-10, DC-8, DC-9-30, DHC-8-300, Gulfstream
        V, SR-20, Tornado, Yak-42
        """
    ),
    "test": _names(
        """
        737-400, 737-800, 757-200, 767-400, ATR-42, BAE-125, Beechcraft 1900, Boeing 717, CRJ-200, CRJ-700,
        E-170, L-1011, MD-90, Saab 2000, Spitfire
        """
    ),
}


#: VGG Flowers 102 labels (1..102, as ``imagelabels.mat`` numbers them) per split (71 / 15 / 16).
VGG_FLOWERS: dict[str, tuple[int, ...]] = {
    "train": (
        90, 38, 80, 30, 29, 12, 43, 27, 4, 64, 31, 99, 8, 67, 95, 77, 78, 61, 88, 74, 55, 32, 21, 13, 79,
        70, 51, 69, 14, 60, 11, 39, 63, 37, 36, 28, 48, 7, 93, 2, 18, 24, 6, 3, 44, 76, 75, 72, 52, 84, 73,
        34, 54, 66, 59, 50, 91, 68, 100, 71, 81, 101, 92, 22, 33, 87, 1, 49, 20, 25, 58
    ),
    "validation": (
        10, 16, 17, 23, 26, 47, 53, 56, 57, 62, 82, 83, 86, 97, 102
    ),
    "test": (
        5, 9, 15, 19, 35, 40, 41, 42, 45, 46, 65, 85, 89, 94, 96, 98
    ),
}  # fmt: skip
